// /proc readers (proc.h).
#include "coordinator/proc.h"

#include "common/socket.h"

#include "common/control_dir.h"
#include "common/ids.h"
#include "common/text.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/endpoint_client.h"

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

std::map<std::string, std::vector<int>> OtherShimControlDirs(const std::string& control_dir) {
  const std::string here = LexicalControlPath(control_dir);
  std::map<std::string, std::vector<int>> other;
  for (const int pid : AllPids()) {
    if (pid == ::getpid()) continue;
    const auto dir = ShimControlDir(pid);
    if (!dir) continue;
    const std::string there = LexicalControlPath(*dir);
    if (there == here || there.starts_with(here + "/")) continue;  // here, or a job dir of it
    other[there].push_back(pid);
  }
  return other;
}

std::string PidListText(const std::vector<int>& pids) {
  std::string list;
  for (const int pid : pids) {
    if (!list.empty()) list += ", ";
    list += std::to_string(pid);
  }
  return list;
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

/// A descriptor of a process and what its /proc/.../fd link names.
struct Descriptor {
  int fd;
  std::string target;
};

/// The descriptors of the process at `proc_dir` ("/proc/<pid>" or "/proc/self").
std::vector<Descriptor> Descriptors(const std::string& proc_dir) {
  std::vector<Descriptor> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(proc_dir + "/fd", ec)) {
    std::error_code link_ec;
    out.push_back({std::atoi(e.path().filename().c_str()),
                   std::filesystem::read_symlink(e.path(), link_ec).string()});
  }
  return out;
}

/// The value after `field` (e.g. "flags:") in /proc/.../fdinfo/<fd>; "" when it has none.
std::string FdInfoField(const std::string& proc_dir, int fd, std::string_view field) {
  std::ifstream info(proc_dir + "/fdinfo/" + std::to_string(fd));
  for (std::string line; std::getline(info, line);) {
    if (!line.starts_with(field)) continue;
    std::istringstream value(line.substr(field.size()));
    std::string word;
    value >> word;
    return word;
  }
  return "";
}

}  // namespace

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

namespace {

/// Pids of every "<pid>.sock" in `control_dir` whose process runs (`alive`) or has exited
/// (gone, or a zombie: ProcessExited).
std::vector<int> SocketPids(const std::string& control_dir, bool alive) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(control_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 6 || name.substr(name.size() - 5) != ".sock") continue;
    const std::string digits = name.substr(0, name.size() - 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const int pid = std::stoi(digits);
    if (pid <= 0 || ProcessExited(pid) == alive) continue;
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

bool AliveHere(int pid, uint64_t start_time) {
  const auto now = ProcessStartTime(pid);
  return now && *now == start_time && !ProcessExited(pid);
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

std::optional<int> LastNamespaceSessionId(const std::string& status_text) {
  std::istringstream in(status_text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSsid:", 0) != 0) continue;
    std::istringstream values(line.substr(6));
    std::optional<int> last;
    for (int v; values >> v;) last = v;
    return last;
  }
  return std::nullopt;
}

std::optional<int> OwnSessionId(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return LastNamespaceSessionId(text.str());
}

bool HoldsIoUring(int pid) {
  static constexpr std::string_view kIoUring = "anon_inode:[io_uring]";
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream maps(base + "/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(kIoUring) != std::string::npos) return true;
  }
  for (const auto& d : Descriptors(base)) {
    if (d.target == kIoUring) return true;
  }
  return false;
}

namespace {

/// Whether `link` (a /proc symbolic link) is a regular file, directory or device; others live
/// on the kernel's internal mounts.
bool IsMountedFile(const std::string& link) {
  struct stat st {};
  return ::stat(link.c_str(), &st) == 0 &&
         (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode));
}

/// The mount id of the file `link` (a /proc symbolic link) names, read from the fdinfo of
/// a descriptor this process opens on it; "" when it cannot be opened.
std::string MountIdOf(const std::string& link) {
  const int fd = ::open(link.c_str(), O_PATH | O_CLOEXEC);
  if (fd < 0) return "";
  std::string id = FdInfoField("/proc/self", fd, "mnt_id:");
  ::close(fd);
  return id;
}

}  // namespace

std::vector<ForeignFile> FilesOnForeignMounts(const std::string& proc_dir) {
  std::set<std::string> mounts;
  std::ifstream mountinfo(proc_dir + "/mountinfo");
  for (std::string line; std::getline(mountinfo, line);) mounts.insert(line.substr(0, line.find(' ')));
  std::vector<ForeignFile> foreign;
  if (mounts.empty()) return foreign;  // unreadable: nothing can be judged
  const auto on_foreign_mount = [&](const std::string& mount) {
    return !mount.empty() && !mounts.contains(mount);
  };
  // A /proc link's file, opened through the link to learn its mount.
  const auto foreign_link = [&](const std::string& link) {
    return IsMountedFile(link) && on_foreign_mount(MountIdOf(link));
  };
  for (const auto& [fd, path] : Descriptors(proc_dir)) {
    if (path.empty() || path[0] != '/' || path.starts_with("/memfd:")) continue;
    if (!IsMountedFile(proc_dir + "/fd/" + std::to_string(fd))) continue;
    if (on_foreign_mount(FdInfoField(proc_dir, fd, "mnt_id:"))) {
      foreign.push_back({fd, path, "descriptor " + std::to_string(fd)});
    }
  }
  std::sort(foreign.begin(), foreign.end(), [](const auto& a, const auto& b) { return a.fd < b.fd; });
  // CRIU dumps these as it dumps descriptors (its fs and mm images), with the same lookup.
  std::set<std::string> seen;  // the executable is mapped too: named once
  for (const auto& [link, what] : {std::pair{"cwd", "its working directory"},
                                   std::pair{"root", "its root directory"},
                                   std::pair{"exe", "its executable"}}) {
    const std::string link_path = proc_dir + "/" + link;
    std::error_code link_ec;
    const std::string path = std::filesystem::read_symlink(link_path, link_ec).string();
    seen.insert(path);
    if (foreign_link(link_path)) foreign.push_back({-1, path, what});
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(proc_dir + "/map_files", ec)) {
    std::error_code link_ec;
    const std::string path = std::filesystem::read_symlink(e.path(), link_ec).string();
    if (link_ec || path.empty() || path[0] != '/' || path.ends_with(" (deleted)") ||
        path.starts_with("/memfd:") || !seen.insert(path).second) {
      continue;
    }
    if (foreign_link(e.path().string())) foreign.push_back({-1, path, "a mapping"});
  }
  return foreign;
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

std::vector<int> NamespacePids(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream words(line.substr(6));
    std::vector<int> pids;
    for (int p; words >> p;) pids.push_back(p);
    return pids;
  }
  return {};
}

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

int FindByInnermostPid(int pid, const std::function<bool(uint64_t start_time)>& started_ok) {
  for (const int here : AllPids()) {
    const uint64_t t = KernelStartTime(here);
    if (t == 0 || !started_ok(t)) continue;
    const std::vector<int> ns = NamespacePids(here);
    if (!ns.empty() && ns.back() == pid && !IsZombie(here)) return here;
  }
  return 0;
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

namespace {

/// The pipe ends `pid` holds: (descriptor, "pipe:[inode]", write end?).
struct PipeEnd {
  int fd;
  std::string pipe;
  bool writes;
};
std::vector<PipeEnd> PipeEnds(int pid) {
  std::vector<PipeEnd> ends;
  const std::string base = "/proc/" + std::to_string(pid);
  for (const auto& [fd, target] : Descriptors(base)) {
    if (!target.starts_with("pipe:[")) continue;
    const std::string flags = FdInfoField(base, fd, "flags:");
    if (flags.empty()) continue;  // closed meanwhile
    ends.push_back({fd, target, (std::strtoul(flags.c_str(), nullptr, 8) & 3) == 1});  // O_WRONLY
  }
  return ends;
}

}  // namespace

std::vector<PipeWrittenOutside> PipesWrittenOutside(const std::vector<int>& tree) {
  std::vector<std::pair<int, std::vector<PipeEnd>>> tree_ends;
  std::set<std::string> read_in_tree;
  for (const int pid : tree) {
    tree_ends.emplace_back(pid, PipeEnds(pid));
    for (const auto& end : tree_ends.back().second) {
      if (!end.writes) read_in_tree.insert(end.pipe);
    }
  }
  std::vector<PipeWrittenOutside> candidates;
  for (const auto& [pid, ends] : tree_ends) {
    for (const auto& end : ends) {
      if (end.writes && !read_in_tree.contains(end.pipe)) candidates.push_back({pid, end.fd});
    }
  }
  // Read outside: the pipe still has a reader, and none is in the tree. Asked of the pipe
  // itself, not by looking for the reader among the processes here: a reader in another PID
  // namespace (the job run under `unshare -pf`, its output read by a process outside) is not
  // in this /proc. A pipe nobody reads any more is no different after a restore.
  std::vector<PipeWrittenOutside> outside;
  for (const auto& candidate : candidates) {
    if (PipeHasReader(candidate.pid, candidate.fd)) outside.push_back(candidate);
  }
  return outside;
}

bool PipeHasReader(int pid, int fd) {
  // An end of our own to the same pipe (opening /proc/<pid>/fd/<fd> reopens the pipe, here
  // as one more writer, closed at once: no reader sees an end of file): a pipe's write end
  // reports POLLERR once no reader is left.
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int own = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (own < 0) return false;
  pollfd p{own, POLLOUT, 0};
  const bool reader = ::poll(&p, 1, 0) >= 0 && (p.revents & POLLERR) == 0;
  ::close(own);
  return reader;
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
         std::to_string(pid) + "')";
}

std::string ProcessName(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";
  return name;
}

}  // namespace cusnap::coord
