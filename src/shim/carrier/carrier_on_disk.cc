// The host carrier's bytes written beside a dump's images and read back (carrier.h,
// WriteFile and ReadFile; the I/O itself: carrier_file.h).
#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/carrier/carrier.h"

namespace cusnap::shim {

size_t HostCarrier::LayoutEndLocked() const {
  return layout_.empty() ? 0 : layout_.back().offset + layout_.back().size;
}

CarrierTransfer HostCarrier::FileTransferLocked(const std::vector<FilePiece>& pieces) const {
  CarrierTransfer result;
  result.bytes = SavedBytesLocked();
  uint64_t data = 0;
  for (const FilePiece& piece : pieces) data += piece.bytes;
  result.zero_bytes = result.bytes - data;
  return result;
}

std::vector<FilePiece> HostCarrier::FilePiecesLocked() const {
  std::vector<FilePiece> pieces;
  const size_t chunk = options_.chunk_bytes;
  for (const Placement& place : layout_) {
    for (size_t c = 0; c < place.zero.size(); ++c) {
      if (place.zero[c]) continue;  // a hole in the file; a memset at reallocate
      const size_t offset = place.offset + c * chunk;
      const size_t bytes = std::min(chunk, place.size - c * chunk);
      if (!pieces.empty() && pieces.back().offset + pieces.back().bytes == offset) {
        pieces.back().bytes += bytes;  // adjacent: one piece
      } else {
        pieces.push_back({arena_.data() + offset, offset, bytes});
      }
    }
  }
  return pieces;
}

Result<CarrierTransfer> HostCarrier::WriteFile(const std::string& stem_path) {
  std::lock_guard lock(mutex_);
  const uint64_t start = MonotonicNs();
  if (layout_.empty() || !file_parts_.empty() || !unsynced_.empty()) {
    return Error{CUDA_ERROR_INVALID_VALUE,
                 ThisProcess() + ": host carrier: nothing to write to " + stem_path +
                     (!file_parts_.empty() ? " (the saved bytes are in files already)"
                      : !unsynced_.empty() ? " (a copy of an earlier transfer may still run)"
                                           : " (no save holds bytes)")};
  }
  const size_t slash = stem_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : stem_path.substr(0, slash);
  const std::string stem = slash == std::string::npos ? stem_path : stem_path.substr(slash + 1);
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  const size_t unit = FileUnitBytes();
  const unsigned threads = options_.provision_threads;
  std::vector<FilePart> parts = PlanParts(stem, LayoutEndLocked(), pieces, threads, unit);
  if (Status written = WriteParts(dir, parts, pieces, threads, unit); !written) {
    return Error{written.error().code, ThisProcess() + ": host carrier: " + written.error().message};
  }
  // The registration goes first: the driver must not keep pages the kernel takes back.
  uint64_t unregister_ns = 0;
  if (CUresult r = UnregisterAllLocked(&unregister_ns); r != CUDA_SUCCESS) {
    return Error{static_cast<int>(r), ThisProcess() + ": host carrier: unregistering the arena "
                                          "after writing " + stem_path + "-*.bin failed with " +
                                          ResultText(api_, r) + " (the bytes stay in memory too)"};
  }
  arena_pinned_ = false;
  arena_.ShrinkTo(0);
  file_parts_ = std::move(parts);
  file_dir_ = dir;
  CarrierTransfer result = FileTransferLocked(pieces);
  result.chunks = file_parts_.size();
  result.register_ns = unregister_ns;
  result.ns = MonotonicNs() - start;
  result.copy_ns = result.ns - unregister_ns;
  CUSNAP_LOG_INFO("host carrier: %llu bytes written to %zu files %s-*.bin in %llu ns",
                  static_cast<unsigned long long>(result.bytes - result.zero_bytes), file_parts_.size(),
                  stem_path.c_str(), static_cast<unsigned long long>(result.copy_ns));
  return result;
}

Result<CarrierTransfer> HostCarrier::ReadFile(const std::string& dir) {
  std::lock_guard lock(mutex_);
  const uint64_t start = MonotonicNs();
  if (file_parts_.empty()) return CarrierTransfer{};  // in memory: nothing to read
  const std::string from = dir.empty() ? file_dir_ : dir;
  uint64_t provision_ns = 0;
  if (Status grown = GrowLocked(LayoutEndLocked(), &provision_ns); !grown) return grown.error();
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  if (Status read = ReadParts(from, file_parts_, pieces, options_.provision_threads, FileUnitBytes());
      !read) {
    return Error{read.error().code, ThisProcess() + ": host carrier: " + read.error().message +
                                        "; the saved bytes stay in the files"};
  }
  file_parts_.clear();
  CarrierTransfer result = FileTransferLocked(pieces);
  result.provision_ns = provision_ns;
  result.chunks = pieces.size();
  result.ns = MonotonicNs() - start;
  result.copy_ns = result.ns - result.provision_ns;
  return result;
}

std::string HostCarrier::file_name() const {
  std::lock_guard lock(mutex_);
  return FileNamesLocked();
}

std::vector<FilePart> HostCarrier::file_parts() const {
  std::lock_guard lock(mutex_);
  return file_parts_;
}

std::string HostCarrier::FileNamesLocked() const {
  std::string names;
  for (const FilePart& part : file_parts_) names += (names.empty() ? "" : ", ") + part.name;
  return names;
}

Status HostCarrier::SavedBytesInMemory() const {
  std::lock_guard lock(mutex_);
  return InMemoryLocked();
}

Status HostCarrier::InMemoryLocked() const {
  if (file_parts_.empty()) return Ok{};
  return Error{CUDA_ERROR_INVALID_VALUE,
               ThisProcess() + ": host carrier: the saved bytes are in the files " + FileNamesLocked() +
                   " (written for a dump), not in memory: READ_CARRIER brings them back before "
                   "a reallocate"};
}

}  // namespace cusnap::shim
