// One command at a time per participant (command_lock.h).
#include "coordinator/participants/command_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>

namespace cusnap::coord {

namespace {

/// The locks this process holds, by path: a second open of the file would be a second open
/// file description, which flock treats as another holder.
std::mutex g_mutex;
std::map<std::string, std::weak_ptr<CommandLock>>& Held() {
  static auto* held = new std::map<std::string, std::weak_ptr<CommandLock>>;
  return *held;
}

}  // namespace

Result<std::shared_ptr<CommandLock>> CommandLock::Take(const std::string& endpoint,
                                                       const std::string& who) {
  const std::string path = endpoint + ".lock";
  std::lock_guard guard(g_mutex);
  if (auto held = Held()[path].lock()) return held;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Error{errno, "cannot open " + path + ": " + std::strerror(errno)};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Error{EBUSY, who + " is in the middle of another cusnap command (that command holds " +
                              path + "): wait for it to end, then run this one again"};
    }
    return Error{err, "cannot lock " + path + ": " + std::strerror(err)};
  }
  std::shared_ptr<CommandLock> lock(new CommandLock(path, fd));
  Held()[path] = lock;
  return lock;
}

CommandLock::~CommandLock() {
  std::lock_guard guard(g_mutex);
  Held().erase(path_);
  ::close(fd_);  // drops the flock
}

std::vector<std::string> StaleCommandLocks(const std::string& dir) {
  std::vector<std::string> stale;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = e.path().string();
    if (!path.ends_with(".sock.lock")) continue;
    const std::string socket = path.substr(0, path.size() - 5);
    if (::access(socket.c_str(), F_OK) == 0) continue;  // its process may still be there
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) stale.push_back(path);
    ::close(fd);
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

}  // namespace cusnap::coord
