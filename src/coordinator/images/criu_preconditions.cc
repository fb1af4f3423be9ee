// CRIU's preconditions read from /proc (criu_preconditions.h).
#include "coordinator/images/criu_preconditions.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

namespace cusnap::coord {

namespace {
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
  // in this /proc, and such a pipe is refused all the same. A pipe nobody reads any more is
  // no different after a restore.
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

}  // namespace cusnap::coord
