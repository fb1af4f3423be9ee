#include "criu_plugin/criu_api.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cusnap-criu-opts.h"

namespace cusnap::criu_plugin {
namespace {

using PrintOnLevel = void (*)(unsigned, const char*, ...);
using CheckAndRemoveInventoryPlugin = bool (*)(const char*, size_t);
using AddInventoryPlugin = int (*)(const char*);
using GetImageDir = int (*)();

struct CriuApi {
  PrintOnLevel print_on_level = nullptr;
  CheckAndRemoveInventoryPlugin check_and_remove_inventory_plugin = nullptr;
  AddInventoryPlugin add_inventory_plugin = nullptr;
  GetImageDir criu_get_image_dir = nullptr;
  const unsigned char* opts = nullptr;
  const void* const* root_item = nullptr;  ///< CRIU's `struct pstree_item *root_item`
};

/// The leading fields of CRIU 4.2.1's `struct pstree_item` (include/pstree.h) and `struct
/// pid` (include/pid.h), as far as the dumped root's pid; read only from the CRIU version
/// ResolveCriuApi accepted.
struct CriuPid {
  const void* item;
  int real;
};
struct CriuPstreeItem {
  const void* parent;
  const void* children[2];
  const void* sibling[2];
  const CriuPid* pid;
};

CriuApi& Api() {
  static CriuApi api;
  return api;
}

template <typename Pointer>
void Lookup(const char* symbol, Pointer& into, std::string& missing) {
  into = reinterpret_cast<Pointer>(::dlsym(RTLD_DEFAULT, symbol));
  if (into == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
}

/// The first line of `/proc/self/exe --version` ("Version: 4.2.1"), "" when it cannot be run.
std::string RunningVersionLine() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDERR_FILENO);
    ::execl("/proc/self/exe", "criu", "--version", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[256];
  for (ssize_t n; child > 0 && (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n > 0) out.append(buffer, static_cast<size_t>(n));
    else if (errno != EINTR) break;
  }
  ::close(fds[0]);
  while (child > 0 && ::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  return out.substr(0, out.find('\n'));
}

template <typename Field>
Field OptsField(size_t offset) {
  Field value{};
  std::memcpy(&value, Api().opts + offset, sizeof value);
  return value;
}

}  // namespace

void CriuLog(CriuLogLevel level, const std::string& line) {
  if (Api().print_on_level == nullptr) return;
  Api().print_on_level(static_cast<unsigned>(level), "%scusnap_criu: %s\n",
                       level == CriuLogLevel::kError ? "Error: " : "", line.c_str());
}

std::string ResolveCriuApi() {
  std::string missing;
  Lookup("print_on_level", Api().print_on_level, missing);
  Lookup("check_and_remove_inventory_plugin", Api().check_and_remove_inventory_plugin, missing);
  Lookup("add_inventory_plugin", Api().add_inventory_plugin, missing);
  Lookup("criu_get_image_dir", Api().criu_get_image_dir, missing);
  Lookup("opts", Api().opts, missing);
  Lookup("root_item", Api().root_item, missing);
  if (!missing.empty()) return "this criu lacks " + missing;
  // `opts` is read through offsets that hold for one CRIU version only.
  const std::string line = RunningVersionLine();
  if (line != std::string("Version: ") + CUSNAP_CRIU_VERSION) {
    Api().opts = nullptr;
    return "this criu says \"" + line + "\", the plugin was built for CRIU " +
           CUSNAP_CRIU_VERSION + " (scripts/fetch_criu.sh): build the plugin against this CRIU";
  }
  return "";
}

CriuRunOptions ReadRunOptions() {
  static_assert(CUSNAP_CRIU_OPTS_TREE_ID_SIZE == sizeof(int));
  static_assert(CUSNAP_CRIU_OPTS_FINAL_STATE_SIZE == sizeof(int));
  static_assert(CUSNAP_CRIU_OPTS_TRACK_MEM_SIZE == sizeof(int));
  static_assert(CUSNAP_CRIU_OPTS_LAZY_PAGES_SIZE == sizeof(bool));
  static_assert(CUSNAP_CRIU_OPTS_STREAM_SIZE == sizeof(int));
  CriuRunOptions o;
  if (Api().opts == nullptr) return o;
  o.tree_id = OptsField<int>(CUSNAP_CRIU_OPTS_TREE_ID_OFFSET);
  // A dump over CRIU's RPC (`criu swrk`: runc, Podman, containerd) takes the request's pid
  // and leaves opts.tree_id 0; cr_dump_tasks has put the root in root_item before the
  // plugin's init either way.
  if (o.tree_id == 0 && Api().root_item != nullptr && *Api().root_item != nullptr) {
    const auto* root = static_cast<const CriuPstreeItem*>(*Api().root_item);
    if (root->pid != nullptr) o.tree_id = root->pid->real;
  }
  o.leave_running = OptsField<int>(CUSNAP_CRIU_OPTS_FINAL_STATE_OFFSET) == CUSNAP_CRIU_TASK_ALIVE;
  o.track_mem = OptsField<int>(CUSNAP_CRIU_OPTS_TRACK_MEM_OFFSET) != 0;
  o.lazy_pages = OptsField<bool>(CUSNAP_CRIU_OPTS_LAZY_PAGES_OFFSET);
  o.stream = OptsField<int>(CUSNAP_CRIU_OPTS_STREAM_OFFSET) != 0;
  return o;
}

const char* BuiltForCriuVersion() { return CUSNAP_CRIU_VERSION; }

bool AddToInventory(const char* name) {
  return Api().add_inventory_plugin != nullptr && Api().add_inventory_plugin(name) == 0;
}

bool InventoryNames(const char* name) {
  return Api().check_and_remove_inventory_plugin != nullptr &&
         Api().check_and_remove_inventory_plugin(name, std::strlen(name));
}

int ImagesDirFd() {
  return Api().criu_get_image_dir != nullptr ? Api().criu_get_image_dir() : -1;
}

}  // namespace cusnap::criu_plugin
