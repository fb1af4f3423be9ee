// What libcusnap_criu.so calls in CRIU itself: the functions the criu program exports to its
// plugins (it is linked -rdynamic) beyond criu-plugin.h's criu_get_image_dir(), looked up
// once in CRIU's own process, and CRIU's log. A CRIU that lacks one of them is named and
// refused in the plugin's init, never met by a crash at a hook's first call (the plugin is
// loaded with RTLD_LAZY).
#pragma once

#include <string>

namespace cusnap::criu_plugin {

/// CRIU's log levels (criu/include/log.h): a message shows when CRIU's -v is at least its
/// level (runc and Podman run CRIU at -v4).
enum class CriuLogLevel : unsigned { kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

/// Writes one line into CRIU's log (criu -o / runc's dump.log), prefixed "cusnap_criu: ".
void CriuLog(CriuLogLevel level, const std::string& line);

/// Looks up the CRIU functions the plugin needs in the running criu. "" when all are there,
/// else which are missing (the CRIU is older than the one the plugin was built for).
std::string ResolveCriuApi();

/// On restore: whether the images' inventory names `name` (CRIU's
/// check_and_remove_inventory_plugin, which also takes it off the list of plugins the
/// restore still lacks: a plugin the inventory names and that does not take itself off fails
/// the restore with "Missing required plugin"; images from before CRIU recorded plugins count
/// as naming every plugin).
bool InventoryNames(const char* name);

}  // namespace cusnap::criu_plugin
