// The carrier's bytes on disk: `cusnap dump` has each process write its carrier beside
// CRIU's images on several threads (kWriteCarrier), then give the arena back to the kernel,
// so that CRIU, whose page writing and reading run on one thread at 1.4-1.8 GB/s whatever the
// medium (docs/MEASURED.md M19), neither writes nor reads those bytes again; the restore
// reads them back the same way (kReadCarrier). Direct I/O (O_DIRECT) where the filesystem
// takes it, so a disk-sized carrier does not go through the page cache twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/error.h"

namespace cusnap::shim {

/// One range of host memory and where its bytes sit in the file.
struct FilePiece {
  std::byte* memory = nullptr;
  uint64_t file_offset = 0;
  size_t bytes = 0;
};

/// Bytes one thread reads or writes at a time.
inline constexpr size_t kFileUnit = size_t{64} << 20;

/// Creates `path` (mode 0600, replacing a file there) `file_bytes` long, writes every piece at
/// its offset on up to `threads` threads (ranges between pieces stay holes: read back as
/// zeros), then makes the file and its directory entry durable (fdatasync, fsync of the
/// directory). Errors: errno-coded, naming the path and the failing byte range; the file is
/// removed then.
Status WriteFilePieces(const std::string& path, uint64_t file_bytes,
                       std::span<const FilePiece> pieces, unsigned threads);

/// Reads every piece from `path` on up to `threads` threads. Errors: errno-coded naming the
/// path (ENOENT when it is missing), EINVAL when its size is not `file_bytes` (both named),
/// EIO naming the range when the file ends early.
Status ReadFilePieces(const std::string& path, uint64_t file_bytes,
                      std::span<const FilePiece> pieces, unsigned threads);

}  // namespace cusnap::shim
