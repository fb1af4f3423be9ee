// What libcusnap_criu.so calls in CRIU itself: the functions the criu program exports to its
// plugins (it is linked -rdynamic), looked up once in CRIU's own process, CRIU's log, and the
// few options of CRIU's global `opts` a plugin must know (CRIU hands a plugin only the stage;
// runc passes the options over RPC, so they are not on CRIU's command line). A CRIU that
// lacks one of the functions, or is not the version whose `opts` layout the plugin was built
// with (scripts/fetch_criu.sh, cusnap-criu-opts.h), is named and refused in the plugin's
// init, never met by a crash at a hook's first call (the plugin is loaded with RTLD_LAZY).
#pragma once

#include <string>

namespace cusnap::criu_plugin {

/// CRIU's log levels (criu/include/log.h): a message shows when CRIU's -v is at least its
/// level (runc and Podman run CRIU at -v4).
enum class CriuLogLevel : unsigned { kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

/// Writes one line into CRIU's log (criu -o / runc's dump.log), prefixed "cusnap_criu: ".
void CriuLog(CriuLogLevel level, const std::string& line);

/// Looks up the CRIU functions and `opts` the plugin needs in the running criu, and checks
/// that it is the CRIU version the plugin was built for. "" when all is there, else what is
/// missing or wrong, in words.
std::string ResolveCriuApi();

/// The options of this CRIU run that decide what the plugin can serve (read from CRIU's
/// `opts` through the offsets of cusnap-criu-opts.h; only valid once ResolveCriuApi passed).
struct CriuRunOptions {
  int tree_id = 0;           ///< the dumped tree's root (criu dump -t, or the RPC request's pid), CRIU's PID namespace
  bool leave_running = false;///< --leave-running (final state: alive)
  bool track_mem = false;    ///< --track-mem (iterative pre-dumps)
  bool lazy_pages = false;   ///< --lazy-pages
  bool stream = false;       ///< --stream (images go through criu-image-streamer)
};
CriuRunOptions ReadRunOptions();

/// The version of CRIU the plugin was built for ("4.2.1").
const char* BuiltForCriuVersion();

/// On dump: names the plugin in the images' inventory, so that a restore without it fails by
/// CRIU's own check ("Missing required plugin") before anything is restored. False when
/// CRIU refused.
bool AddToInventory(const char* name);

/// On restore: whether the images' inventory names `name` (CRIU's
/// check_and_remove_inventory_plugin, which also takes it off the list of plugins the
/// restore still lacks: a plugin the inventory names and that does not take itself off fails
/// the restore with "Missing required plugin"; images from before CRIU recorded plugins count
/// as naming every plugin).
bool InventoryNames(const char* name);

/// CRIU's descriptor of the images directory (criu_get_image_dir), -1 when it has none.
int ImagesDirFd();

}  // namespace cusnap::criu_plugin
