// The carrier's bytes on disk (carrier_file.h).
#include "shim/carrier/carrier_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

// Direct I/O wants memory, offset and length aligned to the logical block size; 4 KiB
// covers every device we run on.
constexpr uintptr_t kDirectAlign = 4096;

struct Unit {
  std::byte* memory;
  uint64_t offset;
  size_t bytes;
};

// One transfer's shared state: the units, the next one to take, the first failure.
struct Io {
  std::string path;
  bool writing = false;
  int buffered_fd = -1;
  int direct_fd = -1;  // -1: the filesystem refused O_DIRECT
  std::vector<Unit> units;
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status first = Ok{};

  int FdFor(const Unit& u) const {
    const bool aligned = (reinterpret_cast<uintptr_t>(u.memory) | u.offset | u.bytes) %
                             kDirectAlign == 0;
    return aligned && direct_fd >= 0 ? direct_fd : buffered_fd;
  }

  void Fail(const Unit& u, int error, const char* what) {
    std::lock_guard lock(mutex);
    if (!first) return;
    first = Error{error, std::string(writing ? "writing" : "reading") + " bytes [" +
                             std::to_string(u.offset) + ", " + std::to_string(u.offset + u.bytes) +
                             ") of " + path + " failed: " + what};
  }

  // Moves one unit whole (pread/pwrite may move less than asked).
  void Move(const Unit& u) {
    const int fd = FdFor(u);
    size_t done = 0;
    while (done < u.bytes) {
      const ssize_t n = writing ? pwrite(fd, u.memory + done, u.bytes - done, u.offset + done)
                                : pread(fd, u.memory + done, u.bytes - done, u.offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fail(u, errno, strerror(errno));
      if (n == 0) return Fail(u, EIO, "the file ends early");
      done += static_cast<size_t>(n);
    }
  }

  void Work() {
    for (size_t k; (k = next.fetch_add(1)) < units.size();) {
      {
        std::lock_guard lock(mutex);
        if (!first) return;  // one failure ends the transfer
      }
      Move(units[k]);
    }
  }
};

std::vector<Unit> Split(std::span<const FilePiece> pieces) {
  std::vector<Unit> units;
  for (const FilePiece& p : pieces) {
    for (size_t at = 0; at < p.bytes; at += kFileUnit) {
      units.push_back({p.memory + at, p.file_offset + at, std::min(kFileUnit, p.bytes - at)});
    }
  }
  return units;
}

// Runs io.Work on up to `threads` threads (the caller's among them); returns the first error.
Status RunThreads(Io& io, unsigned threads) {
  std::vector<pthread_t> started;
  const size_t extra = std::min<size_t>(threads > 1 ? threads - 1 : 0, io.units.size());
  for (size_t i = 0; i < extra; ++i) {
    pthread_t id;
    const auto work = [](void* arg) -> void* {
      static_cast<Io*>(arg)->Work();
      return nullptr;
    };
    if (!StartQuietThread(&id, work, &io)) break;  // fewer threads: the caller does the rest
    started.push_back(id);
  }
  io.Work();
  for (pthread_t id : started) pthread_join(id, nullptr);
  std::lock_guard lock(io.mutex);
  return io.first;
}

Error Errno(int error, const std::string& what) {
  return Error{error, what + ": " + strerror(error)};
}

// fsync of the directory that holds `path`, so that the new file's entry survives a crash.
int SyncDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int rc = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return rc;
}

}  // namespace

Status WriteFilePieces(const std::string& path, uint64_t file_bytes,
                       std::span<const FilePiece> pieces, unsigned threads) {
  Io io;
  io.path = path;
  io.writing = true;
  io.units = Split(pieces);
  io.buffered_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (io.buffered_fd < 0) return Errno(errno, "cannot create " + path);
  io.direct_fd = open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);  // tmpfs: EINVAL
  Status status = ftruncate(io.buffered_fd, static_cast<off_t>(file_bytes)) == 0
                      ? Status(Ok{})
                      : Errno(errno, "cannot size " + path + " to " + std::to_string(file_bytes) +
                                         " bytes");
  if (status) status = RunThreads(io, threads);
  if (status && fdatasync(io.buffered_fd) != 0) status = Errno(errno, "cannot flush " + path);
  if (io.direct_fd >= 0) close(io.direct_fd);
  close(io.buffered_fd);
  if (status) {
    if (const int rc = SyncDirectory(path); rc != 0) {
      status = Errno(rc, "cannot flush the directory entry of " + path);
    }
  }
  if (!status) unlink(path.c_str());  // a partial file is no carrier
  return status;
}

Status ReadFilePieces(const std::string& path, uint64_t file_bytes,
                      std::span<const FilePiece> pieces, unsigned threads) {
  Io io;
  io.path = path;
  io.units = Split(pieces);
  io.buffered_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (io.buffered_fd < 0) return Errno(errno, "cannot open " + path);
  struct stat st {};
  Status status = Ok{};
  if (fstat(io.buffered_fd, &st) != 0) {
    status = Errno(errno, "cannot stat " + path);
  } else if (static_cast<uint64_t>(st.st_size) != file_bytes) {
    status = Error{EINVAL, path + " holds " + std::to_string(st.st_size) + " bytes, but the "
                               "carrier wrote " + std::to_string(file_bytes)};
  }
  if (status) {
    io.direct_fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    status = RunThreads(io, threads);
    if (io.direct_fd >= 0) close(io.direct_fd);
  }
  close(io.buffered_fd);
  return status;
}

}  // namespace cusnap::shim
