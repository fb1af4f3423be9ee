// The host carrier's bytes written beside a dump's images and read back (carrier.h,
// WriteFile and ReadFile; the I/O itself: carrier_file.h).
#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/carrier/carrier.h"

namespace cusnap::shim {

size_t HostCarrier::LayoutEndLocked() const {
  return layout_.empty() ? 0 : layout_.back().offset + layout_.back().size;
}

std::vector<FilePiece> HostCarrier::FilePiecesLocked() const {
  std::vector<FilePiece> pieces;
  const size_t chunk = options_.chunk_bytes;
  for (const Placement& place : layout_) {
    for (size_t c = 0; c < place.zero.size(); ++c) {
      if (place.zero[c]) continue;  // a hole in the file; a memset at reallocate
      const size_t offset = place.offset + c * chunk;
      const size_t bytes = std::min(chunk, place.size - c * chunk);
      if (!pieces.empty() && pieces.back().file_offset + pieces.back().bytes == offset) {
        pieces.back().bytes += bytes;  // adjacent: one piece
      } else {
        pieces.push_back({arena_.data() + offset, offset, bytes});
      }
    }
  }
  return pieces;
}

Result<CarrierTransfer> HostCarrier::WriteFile(const std::string& path) {
  std::lock_guard lock(mutex_);
  const uint64_t start = MonotonicNs();
  if (layout_.empty() || !file_name_.empty() || !unsynced_.empty()) {
    return Error{CUDA_ERROR_INVALID_VALUE,
                 ThisProcess() + ": host carrier: nothing to write to " + path +
                     (!file_name_.empty() ? " (the saved bytes are in " + file_name_ + " already)"
                      : !unsynced_.empty() ? " (a copy of an earlier transfer may still run)"
                                           : " (no save holds bytes)")};
  }
  const size_t end = LayoutEndLocked();
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  if (Status written = WriteFilePieces(path, end, pieces, options_.provision_threads); !written) {
    return Error{written.error().code, ThisProcess() + ": host carrier: " + written.error().message};
  }
  // The registration goes first: the driver must not keep pages the kernel takes back.
  uint64_t unregister_ns = 0;
  if (CUresult r = UnregisterAllLocked(&unregister_ns); r != CUDA_SUCCESS) {
    return Error{static_cast<int>(r), ThisProcess() + ": host carrier: unregistering the arena "
                                          "after writing " + path + " failed with " +
                                          ResultText(api_, r) + " (the bytes stay in memory too)"};
  }
  arena_pinned_ = false;
  arena_.ShrinkTo(0);
  const size_t slash = path.rfind('/');
  file_name_ = slash == std::string::npos ? path : path.substr(slash + 1);
  CarrierTransfer result;
  for (const Placement& place : layout_) result.bytes += place.size;
  result.chunks = pieces.size();
  uint64_t written_bytes = 0;
  for (const FilePiece& piece : pieces) written_bytes += piece.bytes;
  result.zero_bytes = result.bytes - written_bytes;
  result.register_ns = unregister_ns;
  result.ns = MonotonicNs() - start;
  result.copy_ns = result.ns - unregister_ns;
  CUSNAP_LOG_INFO("host carrier: %llu bytes written to %s in %llu ns",
                  static_cast<unsigned long long>(written_bytes), path.c_str(),
                  static_cast<unsigned long long>(result.copy_ns));
  return result;
}

Result<CarrierTransfer> HostCarrier::ReadFile(const std::string& dir) {
  std::lock_guard lock(mutex_);
  const uint64_t start = MonotonicNs();
  CarrierTransfer result;
  if (file_name_.empty()) return result;  // in memory: nothing to read
  const std::string path = dir + "/" + file_name_;
  const size_t end = LayoutEndLocked();
  if (Status grown = GrowLocked(end, &result.provision_ns); !grown) return grown.error();
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  if (Status read = ReadFilePieces(path, end, pieces, options_.provision_threads); !read) {
    return Error{read.error().code, ThisProcess() + ": host carrier: " + read.error().message +
                                        "; the saved bytes stay in the file"};
  }
  file_name_.clear();
  for (const Placement& place : layout_) result.bytes += place.size;
  uint64_t read_bytes = 0;
  for (const FilePiece& piece : pieces) read_bytes += piece.bytes;
  result.zero_bytes = result.bytes - read_bytes;
  result.chunks = pieces.size();
  result.ns = MonotonicNs() - start;
  result.copy_ns = result.ns - result.provision_ns;
  return result;
}

std::string HostCarrier::file_name() const {
  std::lock_guard lock(mutex_);
  return file_name_;
}

Status HostCarrier::SavedBytesInMemory() const {
  std::lock_guard lock(mutex_);
  return InMemoryLocked();
}

Status HostCarrier::InMemoryLocked() const {
  if (file_name_.empty()) return Ok{};
  return Error{CUDA_ERROR_INVALID_VALUE,
               ThisProcess() + ": host carrier: the saved bytes are in the file " + file_name_ +
                   " (written for a dump), not in memory: READ_CARRIER brings them back before "
                   "a reallocate"};
}

}  // namespace cusnap::shim
