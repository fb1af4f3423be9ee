// Endpoint scans (endpoints.h).
#include "coordinator/participants/endpoints.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "common/socket.h"
#include "common/text.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {

std::string MappedShimPath(int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  static constexpr std::string_view kName = "/libcusnap.so";
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.size() >= kName.size() &&
        path.compare(path.size() - kName.size(), kName.size(), kName) == 0) {
      return path;
    }
  }
  return "";
}

std::optional<std::string> ShimControlDir(int pid) {
  if (MappedShimPath(pid).empty()) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::map<std::string, std::string> env;
  for (std::string entry; std::getline(in, entry, '\0');) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  auto get = [&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  struct stat st {};
  const unsigned uid = ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 ? st.st_uid : 0;
  return ControlDirFor(get("CUSNAP_CONTROL_DIR"), get("XDG_RUNTIME_DIR"), uid);
}

namespace {

// Whether the environment `pid` was started with preloads the shim (LD_PRELOAD names
// libcusnap): read before its maps, which the kernel writes out line by line (a CUDA
// process's run to thousands), so that a scan of every process stays within a usage error's
// time (bench/cli_answer_time.sh: `status` with no endpoint took 1.64x on a GPU machine).
bool PreloadsShim(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  for (std::string entry; std::getline(in, entry, '\0');) {
    if (entry.starts_with("LD_PRELOAD=") && entry.find("libcusnap") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::map<std::string, std::vector<int>> OtherShimControlDirs(const std::string& control_dir) {
  const std::string here = LexicalControlPath(control_dir);
  std::map<std::string, std::vector<int>> other;
  for (const int pid : AllPids()) {
    if (pid == ::getpid() || !PreloadsShim(pid)) continue;
    const auto dir = ShimControlDir(pid);
    if (!dir) continue;
    const std::string there = LexicalControlPath(*dir);
    if (there == here || there.starts_with(here + "/")) continue;  // here, or a job dir of it
    other[there].push_back(pid);
  }
  return other;
}

std::string ShimElsewhere(const std::vector<int>& pids, const std::string& control_dir) {
  for (int pid : pids) {
    const auto dir = ShimControlDir(pid);
    if (!dir) continue;
    if (*dir == control_dir) {
      return ProcessText(pid, ProcessName(pid)) + " has the cusnap shim loaded but no " +
             "endpoint in " + control_dir + " (the shim could not start it: its log is on the " +
             "job's stderr)";
    }
    return ProcessText(pid, ProcessName(pid)) + " has the cusnap shim loaded, and its " +
           "environment puts its endpoint in " + *dir + ", not in " + control_dir + " (the " +
           "job was started with another CUSNAP_CONTROL_DIR or XDG_RUNTIME_DIR): run the " +
           "command with CUSNAP_CONTROL_DIR=" + *dir;
  }
  return "";
}

std::string NoEndpointInTreeText(int pid, const std::vector<int>& tree,
                                 const std::string& control_dir) {
  const std::string elsewhere = ShimElsewhere(tree, control_dir);
  return ProcessText(pid) + ": no process in its tree has a cusnap endpoint in " + control_dir +
         "; " + (elsewhere.empty() ? "start the job with 'cusnap run'" : elsewhere);
}

std::string OtherShimControlDirsText(const std::string& control_dir) {
  std::string text;
  for (const auto& [dir, pids] : OtherShimControlDirs(control_dir)) {
    // Appended piece by piece: GCC 12's -O3 -Werror=restrict flags "lit" + a + b here.
    if (!text.empty()) text += "; ";
    text += "cusnap processes serve their endpoints in ";
    text += dir;
    text += " (pid ";
    text += PidListText(pids);
    text += "): run the command with CUSNAP_CONTROL_DIR=";
    text += dir;
  }
  return text;
}


namespace {

/// Pids of every "<pid>.sock" in `control_dir` whose process runs (`alive`) or has exited
/// (gone, or a zombie: ProcessExited).
std::vector<int> SocketPids(const std::string& control_dir, bool alive) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(control_dir, ec)) {
    const std::optional<int> named = PidOfFileName(entry.path().filename().string(), ".sock");
    if (!named || ProcessExited(*named) == alive) continue;
    const int pid = *named;
    // Served from another PID namespace (a job restored in one of its own): its pid here is
    // another process; such a job is named with --pid (cli/pid_namespace.h).
    const int listener = alive ? SocketListenerPid(EndpointPath(control_dir, pid)) : 0;
    if (listener > 0 && listener != pid) continue;
    pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace

std::vector<int> EndpointPids(const std::string& control_dir) {
  return SocketPids(control_dir, true);
}

std::vector<int> StaleEndpointPids(const std::string& control_dir) {
  return SocketPids(control_dir, false);
}

bool HasEndpoint(const std::string& control_dir, int pid) {
  struct stat st {};
  return ::stat(EndpointPath(control_dir, pid).c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::vector<int> EndpointPidsInTree(const std::string& control_dir, int pid) {
  std::vector<int> out;
  for (int p : ProcessTree(pid)) {
    if (p != ::getpid() && HasEndpoint(control_dir, p) && !ProcessExited(p)) out.push_back(p);
  }
  return out;
}

std::vector<std::string> JobControlDirs(const std::string& control_dir) {
  std::vector<std::string> dirs = {control_dir};
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(control_dir, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec) &&
        IsJobControlDir(control_dir, entry.path().string())) {
      dirs.push_back(entry.path().string());
    }
  }
  std::sort(dirs.begin() + 1, dirs.end());
  return dirs;
}

}  // namespace cusnap::coord
