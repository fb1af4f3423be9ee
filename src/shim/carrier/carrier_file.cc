// The carrier's bytes on disk (carrier_file.h).
#include "shim/carrier/carrier_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

// One read or write call's worth: part `part`'s bytes at `offset` in its file.
struct Unit {
  std::byte* memory;
  size_t part;
  uint64_t offset;
  size_t bytes;
};

// The units of every piece, each inside one part, taken in turn from part to part so that
// threads running at once mostly write different files.
std::vector<Unit> Split(std::span<const FilePart> parts, std::span<const FilePiece> pieces,
                        size_t unit_bytes) {
  std::vector<std::vector<Unit>> per_part(parts.size());
  for (const FilePiece& p : pieces) {
    for (size_t at = 0; at < p.bytes; at += unit_bytes) {
      const uint64_t offset = p.offset + at;
      const auto after = std::upper_bound(parts.begin(), parts.end(), offset,
                                          [](uint64_t o, const FilePart& part) { return o < part.begin; });
      const size_t k = static_cast<size_t>(after - parts.begin()) - 1;
      per_part[k].push_back({p.memory + at, k, offset - parts[k].begin, std::min(unit_bytes, p.bytes - at)});
    }
  }
  std::vector<Unit> units;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& list : per_part) {
      if (round < list.size()) {
        units.push_back(list[round]);
        any = true;
      }
    }
    if (!any) return units;
  }
}

// One transfer's shared state: the units, the next one to take, the first failure.
struct Io {
  std::string dir;
  std::span<const FilePart> parts;
  bool writing = false;
  std::vector<int> fds;  // per part, -1 until opened
  std::vector<Unit> units;
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status first = Ok{};

  // Io is neither copied nor moved (its atomic and mutex): set up in place.
  Io(const std::string& directory, std::span<const FilePart> part_list,
     std::span<const FilePiece> pieces, size_t unit_bytes, bool write)
      : dir(directory), parts(part_list), writing(write), fds(part_list.size(), -1),
        units(Split(part_list, pieces, unit_bytes)) {}

  std::string PathOf(size_t part) const { return dir + "/" + parts[part].name; }

  void Fail(const Unit& u, int error, const char* what) {
    std::lock_guard lock(mutex);
    if (!first) return;
    first = Error{error, std::string(writing ? "writing" : "reading") + " bytes [" +
                             std::to_string(u.offset) + ", " + std::to_string(u.offset + u.bytes) +
                             ") of " + PathOf(u.part) + " failed: " + what};
  }

  // Moves one unit whole (pread/pwrite may move less than asked).
  void Move(const Unit& u) {
    const int fd = fds[u.part];
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

  void Close() {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
};

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

}  // namespace

std::vector<FilePart> PlanParts(const std::string& stem, uint64_t total_bytes,
                                std::span<const FilePiece> pieces, unsigned parts,
                                size_t unit_bytes) {
  uint64_t data = 0;
  for (const FilePiece& p : pieces) data += p.bytes;
  std::vector<uint64_t> cuts;  // the begin of every part after the first
  if (parts > 1 && data >= 2 * uint64_t{unit_bytes}) {
    const uint64_t share = (data + parts - 1) / parts;
    uint64_t seen = 0;
    for (const FilePiece& p : pieces) {
      for (size_t at = 0; at < p.bytes; at += unit_bytes) {
        seen += std::min(unit_bytes, p.bytes - at);
        const uint64_t end = p.offset + std::min<uint64_t>(p.bytes, at + unit_bytes);
        if (cuts.size() + 1 < parts && seen >= share * (cuts.size() + 1) && end < total_bytes &&
            seen < data) {
          cuts.push_back(end);
        }
      }
    }
  }
  std::vector<FilePart> planned;
  uint64_t begin = 0;
  for (size_t k = 0; k <= cuts.size(); ++k) {
    const uint64_t end = k < cuts.size() ? cuts[k] : total_bytes;
    planned.push_back({stem + "-" + std::to_string(k) + ".bin", begin, end - begin});
    begin = end;
  }
  return planned;
}

Status WriteParts(const std::string& dir, std::span<const FilePart> parts,
                  std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes) {
  Io io(dir, parts, pieces, unit_bytes, /*write=*/true);
  Status status = Ok{};
  for (size_t k = 0; k < parts.size() && status; ++k) {
    const std::string path = io.PathOf(k);
    // Never through a symbolic link: the shim writes with the job's rights.
    io.fds[k] = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (io.fds[k] < 0) {
      status = Errno(errno, "cannot create " + path);
      break;
    }
    if (ftruncate(io.fds[k], static_cast<off_t>(parts[k].bytes)) != 0) {
      status = Errno(errno, "cannot size " + path + " to " + std::to_string(parts[k].bytes) + " bytes");
    }
  }
  if (status) status = RunThreads(io, threads);
  for (size_t k = 0; k < parts.size() && status; ++k) {
    if (fdatasync(io.fds[k]) != 0) status = Errno(errno, "cannot flush " + io.PathOf(k));
  }
  io.Close();
  if (status) {
    // The new files' directory entries must survive a crash too.
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) status = Errno(errno, "cannot flush the directory " + dir);
    if (fd >= 0) close(fd);
  }
  if (!status) {
    for (size_t k = 0; k < parts.size(); ++k) unlink(io.PathOf(k).c_str());  // no carrier
  }
  return status;
}

Status ReadParts(const std::string& dir, std::span<const FilePart> parts,
                 std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes) {
  Io io(dir, parts, pieces, unit_bytes, /*write=*/false);
  Status status = Ok{};
  for (size_t k = 0; k < parts.size() && status; ++k) {
    const std::string path = io.PathOf(k);
    io.fds[k] = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (io.fds[k] < 0) {
      status = Errno(errno, "cannot open " + path);
    } else if (fstat(io.fds[k], &st) != 0) {
      status = Errno(errno, "cannot stat " + path);
    } else if (static_cast<uint64_t>(st.st_size) != parts[k].bytes) {
      status = Error{EINVAL, path + " holds " + std::to_string(st.st_size) + " bytes, but the "
                                 "carrier wrote " + std::to_string(parts[k].bytes)};
    }
  }
  if (status) status = RunThreads(io, threads);
  io.Close();
  return status;
}

}  // namespace cusnap::shim
