// The carrier's bytes on disk (carrier_file.h).
#include "shim/carrier/carrier_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

// One unit: part `part`'s bytes at `offset` in its file, digested as one chunk.
struct Unit {
  std::byte* memory;
  size_t part;
  uint64_t offset;
  size_t bytes;
};

// Bytes digested and then written (or read and then digested) at a time: small enough to
// stay in a core's cache between the two, so that each byte crosses memory once.
constexpr size_t kDigestBlock = size_t{1} << 20;

// CUSNAP_TEST_CARRIER_IO_FAULT (carrier_file.h), parsed for one transfer.
struct IoFault {
  enum class Kind { kNone, kShort, kNoSpace, kIo } kind = Kind::kNone;
  size_t unit = 0;

  static IoFault FromEnvironment(bool writing) {
    const char* text = std::getenv(kCarrierIoFaultVariable);
    if (text == nullptr) return {};
    const std::string_view spec(text);
    const std::string_view op = writing ? "write:" : "read:";
    if (!spec.starts_with(op)) return {};
    const std::string_view rest = spec.substr(op.size());
    const size_t colon = rest.find(':');
    if (colon == std::string_view::npos) return {};
    const std::string_view kind = rest.substr(0, colon);
    IoFault fault;
    fault.unit = std::strtoull(std::string(rest.substr(colon + 1)).c_str(), nullptr, 10);
    if (kind == "short") fault.kind = Kind::kShort;
    if (kind == "enospc") fault.kind = Kind::kNoSpace;
    if (kind == "eio") fault.kind = Kind::kIo;
    return fault;
  }
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
      per_part[k].push_back({p.memory != nullptr ? p.memory + at : nullptr, k, offset - parts[k].begin, std::min(unit_bytes, p.bytes - at)});
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
  std::vector<ChunkDigest> digests;  // per unit: what it wrote (a write)
  IoFault fault;
  // Streamed (StreamReadParts, StreamWriteParts): the device side, which gives each thread
  // its buffer.
  UnitCopier* copier = nullptr;
  std::atomic<size_t> next{0};
  std::mutex mutex;
  Status first = Ok{};

  // Io is neither copied nor moved (its atomic and mutex): set up in place.
  Io(const std::string& directory, std::span<const FilePart> part_list,
     std::span<const FilePiece> pieces, size_t unit_bytes, bool write)
      : dir(directory), parts(part_list), writing(write), fds(part_list.size(), -1),
        units(Split(part_list, pieces, unit_bytes)), digests(units.size()),
        fault(IoFault::FromEnvironment(write)) {}

  std::string PathOf(size_t part) const { return dir + "/" + parts[part].name; }

  void Fail(const Unit& u, int error, const char* what) {
    std::lock_guard lock(mutex);
    if (!first) return;
    first = Error{error, std::string(writing ? "writing" : "reading") + " bytes [" +
                             std::to_string(u.offset) + ", " + std::to_string(u.offset + u.bytes) +
                             ") of " + PathOf(u.part) + " failed: " + what};
  }

  // One pread or pwrite call of unit `k`, or the fault injected there.
  ssize_t Call(size_t k, int fd, std::byte* memory, size_t bytes, uint64_t offset, bool& faulted) {
    if (fault.kind != IoFault::Kind::kNone && fault.unit == k && !faulted) {
      faulted = true;
      if (fault.kind == IoFault::Kind::kShort && bytes > 1) bytes /= 2;
      if (fault.kind == IoFault::Kind::kNoSpace) return errno = ENOSPC, -1;
      if (fault.kind == IoFault::Kind::kIo) return errno = EIO, -1;
    }
    return writing ? pwrite(fd, memory, bytes, static_cast<off_t>(offset))
                   : pread(fd, memory, bytes, static_cast<off_t>(offset));
  }

  // Moves [at, at + bytes) of unit `k` whole between `data` (those bytes) and its file
  // (pread/pwrite may move less than asked); false once it failed (recorded).
  bool MoveBlock(size_t k, std::byte* data, size_t at, size_t bytes, bool& faulted) {
    const Unit& u = units[k];
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = Call(k, fds[u.part], data + done, bytes - done, u.offset + at + done, faulted);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fail(u, errno, strerror(errno)), false;
      if (n == 0) return Fail(u, EIO, writing ? "the write moved nothing" : "the file ends early"), false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Moves [at, at + bytes) of unit `k` between `data` (those bytes) and its file, digesting
  // them into `hasher` a block at a time beside the I/O, while the block is in the core's
  // cache. False once it failed (recorded).
  bool MoveDigested(size_t k, std::byte* data, size_t at, size_t bytes, ChunkHasher& hasher,
                    bool& faulted) {
    for (size_t done = 0; done < bytes; done += kDigestBlock) {
      const size_t n = std::min(kDigestBlock, bytes - done);
      if (writing) hasher.Update(data + done, n);
      if (!MoveBlock(k, data + done, at + done, n, faulted)) return false;
      if (!writing) hasher.Update(data + done, n);
    }
    return true;
  }

  // Unit `k`'s digest once all its bytes went through `hasher`: recorded (a write) or checked
  // against the one its write recorded (a read). False once it failed (recorded).
  bool Conclude(size_t k, ChunkHasher& hasher) {
    const Unit& u = units[k];
    if (writing) {
      digests[k] = hasher.Finish();
      return true;
    }
    const FileChunk* expected = Expected(u);
    if (expected == nullptr) return Fail(u, EBADMSG, "no digest was recorded for these bytes"), false;
    if (expected->digest != hasher.Finish()) {
      return Fail(u, EBADMSG, "they do not match the digest written with them (the file is "
                              "corrupt)"),
             false;
    }
    return true;
  }

  // Records `error` (the copier's, named already) as the transfer's failure; false.
  bool FailWith(const Error& error) {
    std::lock_guard lock(mutex);
    if (first) first = error;
    return false;
  }

  // Unit `k` whole: on its own memory, or streamed through `thread`'s buffer a buffer at a
  // time (a write fetches each piece of the device's bytes into it first; a read hands each
  // on once read; the unit's digest is checked at its end, before the restore goes on). A
  // small buffer stays in the processor's cache between the copy engine and the file, where
  // a chunk-sized one is read back from memory: 64 MiB buffers moved 11-14 GB/s to and from
  // /dev/shm, 4 MiB ones 21-31 GB/s (bench/gpu_file_mapping_vs_buffer.cc, docs/MEASURED.md).
  bool Transfer(size_t k, unsigned thread) {
    ChunkHasher hasher;
    bool faulted = false;
    const Unit& u = units[k];
    if (copier == nullptr) {
      return MoveDigested(k, u.memory, 0, u.bytes, hasher, faulted) && Conclude(k, hasher);
    }
    Result<std::byte*> buffer = copier->Buffer(thread);
    if (!buffer) return FailWith(buffer.error());
    const uint64_t base = parts[u.part].begin + u.offset;
    const auto copy = [&](size_t at, size_t n) {
      Status copied = copier->Copy(thread, base + at, n, *buffer);
      return copied ? true : FailWith(copied.error());
    };
    const size_t block = copier->buffer_bytes();
    for (size_t at = 0; at < u.bytes; at += block) {
      const size_t n = std::min(block, u.bytes - at);
      if (writing && !copy(at, n)) return false;
      if (!MoveDigested(k, *buffer, at, n, hasher, faulted)) return false;
      if (!writing && !copy(at, n)) return false;
    }
    return Conclude(k, hasher);
  }

  // The chunk WriteParts recorded for unit `u`'s bytes, or null.
  const FileChunk* Expected(const Unit& u) const {
    const auto& chunks = parts[u.part].chunks;
    const auto at = std::lower_bound(chunks.begin(), chunks.end(), u.offset,
                                     [](const FileChunk& c, uint64_t o) { return c.offset < o; });
    if (at == chunks.end() || at->offset != u.offset || at->bytes != u.bytes) return nullptr;
    return &*at;
  }

  void Work(unsigned thread) {
    for (size_t k; (k = next.fetch_add(1)) < units.size();) {
      {
        std::lock_guard lock(mutex);
        if (!first) return;  // one failure ends the transfer
      }
      if (!Transfer(k, thread)) return;
    }
  }

  void Close() {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
};

// Runs io.Work on up to `threads` threads (the caller's among them, thread 0); returns the
// first error.
Status RunThreads(Io& io, unsigned threads) {
  struct Worker {
    Io* io;
    unsigned thread;
  };
  const size_t extra = std::min<size_t>(threads > 1 ? threads - 1 : 0, io.units.size());
  std::vector<Worker> workers;
  workers.reserve(extra);
  std::vector<pthread_t> started;
  for (size_t i = 0; i < extra; ++i) {
    pthread_t id;
    const auto work = [](void* arg) -> void* {
      const Worker* w = static_cast<Worker*>(arg);
      w->io->Work(w->thread);
      return nullptr;
    };
    workers.push_back({&io, static_cast<unsigned>(i + 1)});
    if (!StartQuietThread(&id, work, &workers.back())) break;  // fewer: the caller does the rest
    started.push_back(id);
  }
  io.Work(0);
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
    planned.push_back({stem + "-" + std::to_string(k) + ".bin", begin, end - begin, {}});
    begin = end;
  }
  return planned;
}

namespace {

// WriteParts, streamed through the copier's buffers when `copier` is set.
Status Write(const std::string& dir, std::span<FilePart> parts, std::span<const FilePiece> pieces,
             unsigned threads, size_t unit_bytes, UnitCopier* copier) {
  Io io(dir, parts, pieces, unit_bytes, /*write=*/true);
  io.copier = copier;
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
    return status;
  }
  for (FilePart& part : parts) part.chunks.clear();
  for (size_t k = 0; k < io.units.size(); ++k) {
    const Unit& u = io.units[k];
    parts[u.part].chunks.push_back({u.offset, u.bytes, io.digests[k]});
  }
  for (FilePart& part : parts) {
    std::sort(part.chunks.begin(), part.chunks.end(),
              [](const FileChunk& a, const FileChunk& b) { return a.offset < b.offset; });
  }
  return status;
}

// Opens every part file of `io` for reading, each of the size written. Errors: FindParts'.
Status OpenForReading(Io& io) {
  for (size_t k = 0; k < io.parts.size(); ++k) {
    const std::string path = io.PathOf(k);
    io.fds[k] = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (io.fds[k] < 0) return Errno(errno, "cannot open " + path);
    if (fstat(io.fds[k], &st) != 0) return Errno(errno, "cannot stat " + path);
    if (static_cast<uint64_t>(st.st_size) != io.parts[k].bytes) {
      return Error{EINVAL, path + " holds " + std::to_string(st.st_size) + " bytes, but the "
                               "carrier wrote " + std::to_string(io.parts[k].bytes)};
    }
  }
  return Ok{};
}

// ReadParts, streamed through the copier's buffers when `copier` is set.
Status Read(const std::string& dir, std::span<const FilePart> parts,
            std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes,
            UnitCopier* copier) {
  Io io(dir, parts, pieces, unit_bytes, /*write=*/false);
  io.copier = copier;
  Status status = OpenForReading(io);
  if (status) status = RunThreads(io, threads);
  io.Close();
  return status;
}

}  // namespace

Status FindParts(const std::string& dir, std::span<const FilePart> parts) {
  Io io(dir, parts, {}, kFileUnit, /*write=*/false);
  Status status = OpenForReading(io);
  io.Close();
  return status;
}

Status WriteParts(const std::string& dir, std::span<FilePart> parts,
                  std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes) {
  return Write(dir, parts, pieces, threads, unit_bytes, nullptr);
}

Status StreamWriteParts(const std::string& dir, std::span<FilePart> parts,
                        std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes,
                        UnitCopier& copier) {
  return Write(dir, parts, pieces, threads, unit_bytes, &copier);
}

Status ReadParts(const std::string& dir, std::span<const FilePart> parts,
                 std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes) {
  return Read(dir, parts, pieces, threads, unit_bytes, nullptr);
}

Status StreamReadParts(const std::string& dir, std::span<const FilePart> parts,
                       std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes,
                       UnitCopier& copier) {
  return Read(dir, parts, pieces, threads, unit_bytes, &copier);
}

}  // namespace cusnap::shim
