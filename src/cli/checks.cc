// The checks `cusnap` makes before a command acts (checks.h).
#include "cli/checks.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <optional>

#include "common/text.h"
#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "common/settings.h"
#include "common/socket.h"
#include "common/unique_fd.h"
#include "coordinator/native/native_driver.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"

namespace cusnap::cli {
namespace {

/// The value of "<key>:" in /proc/<pid>/status, if present.
std::optional<std::string> StatusField(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      const auto begin = line.find_first_not_of(" \t", key.size() + 1);
      return begin == std::string::npos ? "" : line.substr(begin);
    }
  }
  return std::nullopt;
}

/// A timespec as seconds.
double Seconds(const timespec& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

/// Wall-clock seconds at which `pid` started (its /proc start time in ticks since boot,
/// placed on the wall clock through CLOCK_BOOTTIME).
std::optional<double> StartedAt(int pid) {
  const auto ticks = coord::ProcessStartTime(pid);
  if (!ticks) return std::nullopt;
  timespec now{}, boot{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  const double booted_at = Seconds(now) - Seconds(boot);
  return booted_at + static_cast<double>(*ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// Whether the endpoint socket at `path` was left by an earlier process with `pid`'s pid:
/// the shim creates it after its process started, so a socket older than the process now
/// holding the pid is not its own. One second of slack covers the clocks' rounding.
bool OlderThanProcess(const std::string& path, int pid) {
  struct stat st {};
  const auto started = StartedAt(pid);
  if (!started || ::lstat(path.c_str(), &st) != 0) return false;
  const double made = Seconds(st.st_mtim);
  return made + 1.0 < *started;
}

/// The pid of a "<digits>.sock" name, or 0.
int SocketPid(const char* name) {
  char* end = nullptr;
  const long pid = std::strtol(name, &end, 10);
  if (end == name || std::strcmp(end, ".sock") != 0 || pid <= 0 || pid > (1 << 30)) return 0;
  return static_cast<int>(pid);
}

/// Calls `visit(pid, path)` for every "<pid>.sock" in `control_dir` (nothing when it cannot
/// be read).
template <typename Visit>
void ForEachEndpointSocket(const std::string& control_dir, Visit visit) {
  DIR* dir = ::opendir(control_dir.c_str());
  if (dir == nullptr) return;
  while (const dirent* entry = ::readdir(dir)) {
    const int pid = SocketPid(entry->d_name);
    if (pid != 0) visit(pid, EndpointPath(control_dir, pid));
  }
  ::closedir(dir);
}

/// Whether `listener` (SocketListenerPid's answer: the pid that called listen(), in this
/// namespace) still serves its socket. A listener that exited may keep it open while it dies
/// (the threads of a killed process leave after its leader shows as a zombie), and a process
/// that inherited the descriptor may keep it open for good: neither answers as an endpoint.
bool Listening(int listener) { return listener > 0 && !coord::ProcessExited(listener); }

}  // namespace

std::vector<std::string> SettingsProblemsOf(const std::string& command) {
  if (command == "run" || command == "demo") return settings::EnvironmentProblems(~0u);
  uint32_t reader = 0;
  for (size_t bit = 0; bit < std::size(settings::kReaderNames); ++bit) {
    if (command == settings::kReaderNames[bit]) reader = 1u << bit;
  }
  return reader == 0 ? std::vector<std::string>{} : settings::EnvironmentProblems(reader);
}

std::string CheckControlDirReadable(const std::string& control_dir) {
  if (const std::string unsafe = UnsafeControlDir(control_dir); !unsafe.empty()) return unsafe;
  DIR* dir = ::opendir(control_dir.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return "";
    return "cannot read control directory " + control_dir + ": " + std::strerror(errno);
  }
  ::closedir(dir);
  return "";
}

std::string CheckControlDirLength(const std::string& control_dir) {
  constexpr size_t kLimit = sizeof(sockaddr_un::sun_path) - 1;  // its NUL aside
  // The longest endpoint name: pid_max is at most 2^22, 7 digits.
  const std::string longest = EndpointPath(control_dir, 4194304);
  if (longest.size() <= kLimit) return "";
  return "the control directory " + control_dir + " (CUSNAP_CONTROL_DIR) is " +
         std::to_string(control_dir.size()) + " bytes long: its endpoint sockets (" + longest +
         ") would pass the " + std::to_string(kLimit) + "-byte limit of a unix socket path; " +
         "choose a directory of at most " +
         std::to_string(control_dir.size() - (longest.size() - kLimit)) + " bytes";
}

std::string CheckTargetPid(int pid, const std::string& control_dir) {
  const std::string p = std::to_string(pid);
  const auto tgid = StatusField(pid, "Tgid");
  if (!tgid) return ProcessText(pid) + " does not exist";
  if (*tgid != p) {
    const int process = std::stoi(*tgid);
    return ProcessText(pid) + " is thread " + std::to_string(CallerPid(pid)) + " of process " +
           std::to_string(CallerPid(process)) + ", not a process: give " + PidOption(process);
  }
  if (coord::IsZombie(pid)) {
    return ProcessText(pid, coord::ProcessName(pid)) + " " + coord::ExitedText(pid) +
           ": nothing of it runs any more";
  }
  if (const auto uid = StatusField(pid, "Uid")) {
    const std::string real = uid->substr(0, uid->find_first_of(" \t"));
    // Root may act on another user's job, when its endpoints are where root looks.
    if (real != std::to_string(::geteuid()) &&
        (::geteuid() != 0 || coord::EndpointPidsInTree(control_dir, pid).empty())) {
      return ProcessText(pid, coord::ProcessName(pid)) + " belongs to uid " + real +
             ", not to this user (uid " + std::to_string(::geteuid()) + "); cusnap looks for " +
             "endpoints in " + control_dir + ", this user's control directory: run cusnap as " +
             "that user, or set CUSNAP_CONTROL_DIR to the control directory the job was " +
             "started with";
    }
  }
  if (auto unreadable = CheckControlDirReadable(control_dir); !unreadable.empty()) {
    return unreadable;
  }
  for (int member : coord::ProcessTree(pid)) {
    const std::string path = EndpointPath(control_dir, member);
    if (coord::HasEndpoint(control_dir, member) && OlderThanProcess(path, member)) {
      return "endpoint " + path + " is stale: pid " + std::to_string(member) + " was reused by " +
             "a later process (" + coord::ProcessName(member) + ") that cusnap did not start; " +
             "remove it with 'cusnap status --prune'";
    }
  }
  return "";
}

std::vector<StaleEndpoint> StaleEndpoints(const std::string& control_dir) {
  std::vector<StaleEndpoint> stale;
  ForEachEndpointSocket(control_dir, [&](int pid, const std::string& path) {
    if (!coord::HasEndpoint(control_dir, pid)) return;
    // Served by a live process of another PID namespace (a job restored in one of its own):
    // live. A listener that exited (Listening) leaves it stale.
    const int listener = SocketListenerPid(path);
    if (listener == -1) return;  // no verdict
    const bool listening = Listening(listener);
    if (listening && listener != pid) return;
    if (coord::ProcessExited(pid)) {
      stale.push_back(StaleEndpoint{pid, path, false});
    } else if (!listening || OlderThanProcess(path, pid)) {
      // Nothing listens on it while its pid runs: a shim listens from before its process
      // runs the application until it exits, so the process holding the pid is another one
      // (its socket may even be younger than it: the clocks say nothing then).
      stale.push_back(StaleEndpoint{pid, path, true});
    }
  });
  const std::vector<std::string> dirs = coord::JobControlDirs(control_dir);
  for (auto dir = dirs.begin() + 1; dir != dirs.end(); ++dir) {
    ForEachEndpointSocket(*dir, [&](int pid, const std::string& path) {
      const int listener = SocketListenerPid(path);
      if (listener != -1 && !Listening(listener)) {
        stale.push_back(StaleEndpoint{pid, path, false, true});
      }
    });
  }
  return stale;
}

bool ServesEndpoint(const std::string& control_dir, int pid) {
  return SocketListenerPid(EndpointPath(control_dir, pid)) == pid;
}

std::vector<ForeignEndpoint> ForeignEndpoints(const std::string& control_dir) {
  std::vector<ForeignEndpoint> foreign;
  const auto visit = [&](int pid, const std::string& path) {
    const int here = SocketListenerPid(path);
    if (here > 0 && here != pid) foreign.push_back(ForeignEndpoint{pid, here, path});
  };
  // The control directories of jobs `cusnap run --pid-namespace` started, too.
  for (const std::string& dir : coord::JobControlDirs(control_dir)) ForEachEndpointSocket(dir, visit);
  return foreign;
}

std::string StaleReason(const StaleEndpoint& stale) {
  if (stale.job_dir) {
    return "nothing listens on it: its process, pid " + std::to_string(stale.pid) + " of a job "
           "in a PID namespace of its own, is gone";
  }
  if (!stale.reused) return "its process " + coord::ExitedText(stale.pid);
  return ProcessText(stale.pid) + " was reused by a later process (" +
         coord::ProcessName(stale.pid) + ")";
}

}  // namespace cusnap::cli
