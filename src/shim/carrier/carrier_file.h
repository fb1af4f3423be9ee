// The carrier's bytes on disk: `cusnap dump` has each process write its carrier beside
// CRIU's images on several threads (kWriteCarrier), then give the arena back to the kernel,
// so that CRIU, whose page writing and reading run on one thread at 1.4-1.8 GB/s whatever the
// medium (docs/MEASURED.md M19), neither writes nor reads those bytes again; the restore
// reads them back the same way (kReadCarrier). The bytes go into several part files, one
// thread each: tmpfs and ext4 serialise the writes into one file on its inode lock, so one
// file would write at one thread's rate (M22). Each unit written is digested (XXH3-128,
// common/chunk_digest.h) a block at a time right before the block is written, while it is
// in the cache, and checked the same way right after it is read: no pass of its own over the
// bytes at either end. The digests go to the images manifest (the coordinator's) and stay
// with the part list here (this process's memory, which CRIU carries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/chunk_digest.h"
#include "common/error.h"
#include "common/settings.h"

namespace cusnap::shim {

/// Bytes one read or write call moves at most.
inline constexpr size_t kFileUnit = size_t{64} << 20;

/// Bytes of each pinned buffer a streamed transfer moves a unit through (UnitCopier): small
/// enough that every I/O thread's buffer stays in the processor's cache between the copy
/// engine and the file (bench/gpu_file_mapping_vs_buffer.cc).
inline constexpr size_t kStreamBuffer = size_t{4} << 20;

/// One range of host memory and where its bytes sit in the carrier's address space (the
/// arena offset), which the parts divide.
struct FilePiece {
  std::byte* memory = nullptr;
  uint64_t offset = 0;
  size_t bytes = 0;
};

/// One unit of a part file as written: its byte range in the file and its digest.
struct FileChunk {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  ChunkDigest digest;
};

/// One part file: the carrier's bytes [begin, begin + bytes), at file offset 0 on; ranges
/// no piece covers are holes (read back as zeros), and no chunk lists them.
struct FilePart {
  std::string name;  ///< "<stem>-<k>.bin", in the carrier's directory
  uint64_t begin = 0;
  uint64_t bytes = 0;
  std::vector<FileChunk> chunks;  ///< every unit written, by offset (WriteParts fills it)
};

/// Divides [0, total_bytes) into at most `parts` contiguous parts holding about the same
/// bytes of `pieces` each, cut only at multiples of `unit_bytes` from a piece's start (page
/// aligned as the pieces are), named after `stem` (a file name, no directory). One part when
/// the pieces hold less than two units.
std::vector<FilePart> PlanParts(const std::string& stem, uint64_t total_bytes,
                                std::span<const FilePiece> pieces, unsigned parts,
                                size_t unit_bytes);

/// Creates every part file in `dir` (mode 0600, replacing files there; a symbolic link there
/// is refused, ELOOP) at its size, writes the
/// pieces into them, at most `unit_bytes` per unit, on up to `threads` threads, digesting
/// each unit as it is written (parts[k].chunks), then makes the
/// files and their directory entries durable (fdatasync, fsync of the directory). Errors:
/// errno-coded, naming the file and the failing byte range (ENOSPC for a full disk; a write
/// that moves nothing at all: EIO); every part file is removed then.
Status WriteParts(const std::string& dir, std::span<FilePart> parts,
                  std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes);

/// Reads the pieces back from the part files in `dir` on up to `threads` threads, checking
/// each unit against the digest WriteParts recorded for it (parts[k].chunks) as it is read.
/// Errors: errno-coded naming the file (ENOENT when it is missing), EINVAL when its size is
/// not the part's (both named), EIO naming the range when the file ends early or a read
/// fails, EBADMSG naming the file and the chunk's byte range when its bytes do not match
/// their digest (the file is corrupt; the read stops there).
Status ReadParts(const std::string& dir, std::span<const FilePart> parts,
                 std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes);

/// Checks that every part file is in `dir`, can be opened and has the size written. Errors:
/// errno-coded naming the file (ENOENT when it is missing), EINVAL when its size is not the
/// part's (both named).
Status FindParts(const std::string& dir, std::span<const FilePart> parts);

/// The device side of a streamed transfer (StreamReadParts, StreamWriteParts): each I/O
/// thread's buffer, and the copy of one unit between it and the device. Called on every I/O
/// thread at once.
class UnitCopier {
 public:
  virtual ~UnitCopier() = default;
  /// The buffer of I/O thread `thread` (0 .. threads - 1), buffer_bytes() long and pinned
  /// for the copies; asked before each unit (made at the first). Errors: ENOMEM, the
  /// pinning's.
  virtual Result<std::byte*> Buffer(unsigned thread) = 0;
  /// Bytes of each buffer: a unit moves through it in pieces of at most this many.
  virtual size_t buffer_bytes() const = 0;
  /// The carrier's bytes [offset, offset + bytes) (FilePiece::offset's address space) between
  /// the device and `buffer` (thread `thread`'s): a read hands them over read and checked, for
  /// the device; a write asks for them from the device, to digest and write them. Returns
  /// once the copy ran. Errors: the copy's, named.
  virtual Status Copy(unsigned thread, uint64_t offset, size_t bytes, std::byte* buffer) = 0;
};

/// ReadParts through one buffer per I/O thread (`copier`'s; the pieces' memory is not used,
/// only their offsets): each unit is read into its thread's buffer a buffer at a time and
/// handed to `copier`, and checked against its digest at its end (a mismatch fails the read,
/// whose caller keeps the job from running on the bytes), so every byte crosses host memory
/// once and the host memory taken is `threads` buffers. Errors: as ReadParts', and the
/// copier's.
Status StreamReadParts(const std::string& dir, std::span<const FilePart> parts,
                       std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes,
                       UnitCopier& copier);

/// WriteParts through one buffer per I/O thread (`copier`'s): each unit's bytes come from the
/// device into its thread's buffer a buffer at a time, then are digested and written, so
/// every byte crosses host
/// memory once and no arena holds them. Errors: as WriteParts' (every part file is removed
/// then), and the copier's.
Status StreamWriteParts(const std::string& dir, std::span<FilePart> parts,
                        std::span<const FilePiece> pieces, unsigned threads, size_t unit_bytes,
                        UnitCopier& copier);

/// Test seam: CUSNAP_TEST_CARRIER_IO_FAULT="<write|read>:<short|enospc|eio>:<unit>" makes
/// the `unit`th (0-based, in issue order) write or read call of every WriteParts / ReadParts
/// in this process move half its bytes (short: the rest follows in the next call), or fail
/// with ENOSPC or EIO. Unset: no fault. Read once per transfer.
inline constexpr const char* kCarrierIoFaultVariable = settings::kTestCarrierIoFault.name;

}  // namespace cusnap::shim
