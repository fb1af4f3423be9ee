// The record of an images restore in progress (restore_record.h).
#include "coordinator/images/restore_record.h"

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/ids.h"
#include "coordinator/images/manifest.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {

namespace {

std::string RecordPath(const std::string& dir) { return dir + "/" + kRestoreRecordName; }

}  // namespace

Result<UniqueFd> BeginRestoreRecord(const std::string& dir, bool resuming) {
  const std::string path = RecordPath(dir);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Error{errno, "cannot create " + path + ": " + std::strerror(errno)};
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Error{EBUSY, "another `cusnap restore` is restoring from " + dir + " now"};
    }
    return Error{errno, "cannot lock " + path + ": " + std::strerror(errno)};
  }
  if (resuming) return fd;  // the time of the restore that brought the tree back stays
  const std::string text = std::to_string(KernelStartTime(::getpid())) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0) {
    const int err = errno != 0 ? errno : EIO;
    ::unlink(path.c_str());
    return Error{err, "cannot write " + path + ": " + std::strerror(err)};
  }
  return fd;
}

Status EndRestoreRecord(const std::string& dir, UniqueFd& lock) {
  const std::string path = RecordPath(dir);
  const bool removed = ::unlink(path.c_str()) == 0 || errno == ENOENT;
  const int err = errno;
  lock.reset();
  if (!removed) return Error{err, "cannot remove " + path + ": " + std::strerror(err)};
  return Ok{};
}

std::optional<EarlierRestore> ReadRestoreRecord(const std::string& dir) {
  const std::string path = RecordPath(dir);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return std::nullopt;
  EarlierRestore earlier;
  // The lock is asked for only to learn whether a live restore holds it.
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
    earlier.running = errno == EWOULDBLOCK;
  }
  std::ifstream in(path);
  if (!(in >> earlier.started)) {
    if (!earlier.running) return std::nullopt;
    earlier.started = 0;
  }
  return earlier;
}

int InterruptedRestoreRoot(const Manifest& manifest, uint64_t started) {
  if (started == 0 || manifest.root_pid <= 0) return 0;
  return FindByInnermostPid(manifest.root_pid, [started](uint64_t t) { return t >= started; });
}

}  // namespace cusnap::coord
