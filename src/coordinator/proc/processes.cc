// /proc readers (processes.h).
#include "coordinator/proc/processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/ids.h"
#include "common/text.h"

namespace cusnap::coord {

namespace {

/// The fields of /proc/<pid>/stat from field 3 (state) on, or nullopt when the process does
/// not exist. comm (field 2) may contain spaces and parentheses: fields resume after the
/// last ')'.
std::optional<std::vector<std::string>> StatFields(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

/// The NSpid values of a /proc/<pid>/status text (outermost first); empty without one.
std::vector<int> NamespacePidsIn(std::istream& in) {
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream words(line.substr(6));
    std::vector<int> pids;
    for (int p; words >> p;) pids.push_back(p);
    return pids;
  }
  return {};
}

/// Parent pid of `pid` (/proc/<pid>/stat field 4), or -1.
int ParentPid(int pid) {
  const auto fields = StatFields(pid);
  if (!fields || fields->size() < 2) return -1;
  try {
    return std::stoi((*fields)[1]);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::optional<uint64_t> ProcessStartTime(int pid) {
  const auto fields = StatFields(pid);
  if (!fields || fields->size() < 20) return std::nullopt;  // field 22 is the 20th from 3
  try {
    // A process CRIU brought back keeps its checkpointed identity (common/ids.h).
    return RestoredStartTime(pid, std::stoull((*fields)[19]));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<char> ProcessState(int pid) {
  const auto fields = StatFields(pid);
  if (!fields || fields->empty() || (*fields)[0].empty()) return std::nullopt;
  return (*fields)[0][0];
}

std::optional<char> StoppedState(int pid) {
  const auto state = ProcessState(pid);
  if (state != 'T' && state != 't') return std::nullopt;
  return state;
}

bool IsZombie(int pid) {
  const auto fields = StatFields(pid);
  return fields && !fields->empty() && ((*fields)[0] == "Z" || (*fields)[0] == "X");
}

bool ProcessExited(int pid) { return !ProcessStartTime(pid) || IsZombie(pid); }

std::string ExitedText(int pid) {
  if (!IsZombie(pid)) return "no longer exists";
  return "has exited (a zombie its parent, pid " + std::to_string(ParentPid(pid)) +
         ", has not reaped)";
}

std::string PidListText(const std::vector<int>& pids) {
  std::string list;
  for (const int pid : pids) {
    if (!list.empty()) list += ", ";
    list += std::to_string(pid);
  }
  return list;
}
namespace {

/// Children of `pid` from /proc/<pid>/task/*/children, or nullopt when the kernel lacks
/// those files (CONFIG_PROC_CHILDREN off).
std::optional<std::vector<int>> ChildrenFromTasks(int pid) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::vector<int> children;
  bool any_file = false;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(task_dir, ec)) {
    std::ifstream in(task.path() / "children");
    if (!in) continue;
    any_file = true;
    int child = 0;
    while (in >> child) children.push_back(child);
  }
  if (!any_file) return std::nullopt;
  return children;
}

/// Children of `pid` by scanning every /proc/<n>/stat for its parent pid.
std::vector<int> ChildrenFromScan(int pid) {
  std::vector<int> children;
  for (const int candidate : AllPids()) {
    if (ParentPid(candidate) == pid) children.push_back(candidate);
  }
  return children;
}


}  // namespace

std::optional<int> PidOfFileName(std::string_view name, std::string_view suffix) {
  if (!name.ends_with(suffix)) return std::nullopt;
  const std::string_view digits = name.substr(0, name.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const int pid = std::atoi(std::string(digits).c_str());
  return pid > 0 ? std::optional<int>(pid) : std::nullopt;
}

std::vector<int> AllPids() {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pids.push_back(std::atoi(name.c_str()));
  }
  return pids;
}

namespace {

int g_caller_proc = -1;  // KeepCallerProc's descriptor

/// The NSpid values of entry `name` of the /proc at `proc_fd` (outermost first); empty when
/// unreadable.
std::vector<int> NamespacePidsAt(int proc_fd, const std::string& name) {
  const int fd = ::openat(proc_fd, (name + "/status").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text(4096, '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::istringstream in(text);
  return NamespacePidsIn(in);
}

/// Whether entry `name` of the /proc at `proc_fd` is in this process's PID namespace.
bool InOurPidNamespaceAt(int proc_fd, const std::string& name) {
  struct stat theirs {}, ours {};
  return ::fstatat(proc_fd, (name + "/ns/pid").c_str(), &theirs, 0) == 0 &&
         ::stat("/proc/self/ns/pid", &ours) == 0 && theirs.st_dev == ours.st_dev &&
         theirs.st_ino == ours.st_ino;
}

}  // namespace

void KeepCallerProc(int proc_fd) {
  if (g_caller_proc >= 0) ::close(g_caller_proc);
  g_caller_proc = proc_fd;
}

int CallerPidOf(int pid) {
  if (g_caller_proc < 0) return pid;
  static std::map<int, int> found;
  if (const auto it = found.find(pid); it != found.end()) return it->second;
  const int dir_fd = ::dup(g_caller_proc);
  DIR* dir = dir_fd >= 0 ? ::fdopendir(dir_fd) : nullptr;
  if (dir == nullptr) {
    if (dir_fd >= 0) ::close(dir_fd);
    return 0;
  }
  ::rewinddir(dir);
  int caller = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<int> pids = NamespacePidsAt(g_caller_proc, name);
    if (pids.size() >= 2 && pids.back() == pid && InOurPidNamespaceAt(g_caller_proc, name)) {
      caller = pids.front();
      break;
    }
  }
  ::closedir(dir);
  if (caller > 0) found[pid] = caller;
  return caller;
}

std::vector<int> ProcessTree(int pid) {
  std::vector<int> out;
  if (!ProcessStartTime(pid)) return out;
  std::set<int> seen{pid};
  out.push_back(pid);
  for (size_t i = 0; i < out.size(); ++i) {
    // One named vector (not a conditional temporary): GCC 12 at -O2 reports a bogus
    // -Wfree-nonheap-object on the temporary of `a ? *opt : f()`.
    auto children = ChildrenFromTasks(out[i]);
    const std::vector<int> found = children ? std::move(*children) : ChildrenFromScan(out[i]);
    for (int child : found) {
      if (seen.insert(child).second) out.push_back(child);
    }
  }
  return out;
}
bool AliveHere(int pid, uint64_t start_time) {
  const auto now = ProcessStartTime(pid);
  return now && *now == start_time && !ProcessExited(pid);
}

std::vector<int> NamespacePids(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  return NamespacePidsIn(in);
}

int FindByInnermostPid(int pid, const std::function<bool(uint64_t start_time)>& started_ok) {
  for (const int here : AllPids()) {
    const uint64_t t = KernelStartTime(here);
    if (t == 0 || !started_ok(t)) continue;
    const std::vector<int> ns = NamespacePids(here);
    if (!ns.empty() && ns.back() == pid && !IsZombie(here)) return here;
  }
  return 0;
}

bool SameNamespace(const char* kind, int a, int b) {
  struct stat sa {}, sb {};
  const std::string tail = std::string("/ns/") + kind;
  if (::stat(("/proc/" + std::to_string(a) + tail).c_str(), &sa) != 0 ||
      ::stat(("/proc/" + std::to_string(b) + tail).c_str(), &sb) != 0) {
    return true;
  }
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string StoppedText(int pid, char state) {
  if (state == 't') {  // a tracer's stop: SIGCONT does not end it
    return ProcessText(pid, ProcessName(pid)) + " is stopped by a debugger or tracer (state " +
           "t), not by cusnap: its endpoint cannot answer; let the debugger continue it, or " +
           "detach it";
  }
  return ProcessText(pid, ProcessName(pid)) + " is stopped (state " + std::string(1, state) +
         "), not by cusnap: its endpoint cannot answer; continue it ('kill -CONT " +
         std::to_string(CallerPid(pid)) + "')";
}

std::string ProcessName(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";
  return name;
}

}  // namespace cusnap::coord
