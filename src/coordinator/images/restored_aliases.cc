// Start-time aliases (restored_aliases.h).
#include "coordinator/images/restored_aliases.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/ids.h"
#include "common/text.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/proc/processes.h"
#include "coordinator/record/state_file.h"

namespace cusnap::coord {

std::vector<RestoredAlias> RestoredAliases(const std::string& control_dir) {
  std::vector<RestoredAlias> aliases;
  for (const std::string& dir : JobControlDirs(control_dir)) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/restored", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      RestoredAlias a{e.path().string(), std::atoi(name.c_str())};
      std::ifstream in(e.path());
      if (in >> a.outside >> a.inside >> a.original) aliases.push_back(std::move(a));
    }
  }
  return aliases;
}

std::vector<uint64_t> StartTimesSeenFrom(int ns_pid, const std::vector<int>& pids) {
  std::vector<uint64_t> out(pids.size(), 0);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return out;
  const pid_t child = ::fork();
  if (child == 0) {
    const std::string ns = "/proc/" + std::to_string(ns_pid) + "/ns/time";
    const int fd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && ::setns(fd, CLONE_NEWTIME) == 0) {
      for (int pid : pids) {
        const uint64_t seen = KernelStartTime(pid);
        if (::write(pipe_fds[1], &seen, sizeof seen) != sizeof seen) break;
      }
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  if (child > 0) {
    for (auto& v : out) {
      if (::read(pipe_fds[0], &v, sizeof v) != sizeof v) break;
    }
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  ::close(pipe_fds[0]);
  return out;
}

Status WriteRestoredAlias(const std::string& control_dir, int pid, uint64_t inside,
                          uint64_t original) {
  const uint64_t now = KernelStartTime(pid);
  if (now == 0) return Error{ESRCH, ProcessText(pid) + " is gone"};
  const std::string dir = control_dir + "/restored";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error{errno, "cannot create " + dir + ": " + std::strerror(errno)};
  }
  return WriteFileDurably(dir, std::to_string(pid),
                          std::to_string(now) + " " + std::to_string(inside) + " " +
                              std::to_string(original) + "\n");
}

Result<bool> AdoptRestoredProcess(const std::string& control_dir, int pid, uint64_t original) {
  const uint64_t now = KernelStartTime(pid);
  if (now == 0 || now <= original) return false;
  const std::vector<uint64_t> inside = StartTimesSeenFrom(pid, {pid});
  if (auto s = WriteRestoredAlias(control_dir, pid, inside[0] != 0 ? inside[0] : now, original); !s) {
    return s.error();
  }
  return true;
}

std::vector<std::string> StaleRestoredAliases(const std::string& control_dir) {
  std::set<uint64_t> started;
  for (const int pid : AllPids()) {
    if (const uint64_t t = KernelStartTime(pid); t != 0) started.insert(t);
  }
  std::vector<std::string> stale;
  if (started.empty()) return stale;  // no /proc to judge by
  for (const RestoredAlias& a : RestoredAliases(control_dir)) {
    if (!started.contains(a.outside) && !started.contains(a.inside)) stale.push_back(a.path);
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

int RunningRestoredCopy(const std::string& control_dir, int pid, uint64_t original) {
  std::vector<uint64_t> restored;  // new start times of copies of the dumped process
  for (const RestoredAlias& a : RestoredAliases(control_dir)) {
    if (a.pid == pid && a.original == original) restored.push_back(a.outside);
  }
  if (restored.empty()) return 0;
  return FindByInnermostPid(pid, [&](uint64_t started) {
    return std::find(restored.begin(), restored.end(), started) != restored.end();
  });
}

}  // namespace cusnap::coord
