// The host carrier's bytes written beside a dump's images and read back (carrier.h,
// WriteFile and ReadFile; the I/O itself: carrier_file.h).
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/carrier/carrier.h"
#include "shim/carrier/carrier_transfer.h"

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
        // Streamed transfers use only the offsets: a given-back arena has no memory.
        pieces.push_back({arena_.data() != nullptr ? arena_.data() + offset : nullptr, offset, bytes});
      }
    }
  }
  return pieces;
}

Result<CarrierTransfer> HostCarrier::WriteFile(const std::string& stem_path) {
  std::lock_guard lock(mutex_);
  const uint64_t start = MonotonicNs();
  const auto [dir, stem] = SplitStemPath(stem_path);
  // A save to this stem streamed the bytes there already (its folder may be reached by
  // another path now): only the arena goes.
  const bool streamed = !file_parts_.empty() && file_parts_.front().name.starts_with(stem + "-");
  if (layout_.empty() || (!file_parts_.empty() && !streamed) || !unsynced_.empty()) {
    return Error{CUDA_ERROR_INVALID_VALUE,
                 ThisProcess() + ": host carrier: nothing to write to " + stem_path +
                     (!file_parts_.empty() ? " (the saved bytes are in files already)"
                      : !unsynced_.empty() ? " (a copy of an earlier transfer may still run)"
                                           : " (no save holds bytes)")};
  }
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  std::vector<FilePart> parts = file_parts_;  // kept there until the arena went
  if (!streamed) {
    const size_t unit = FileUnitBytes();
    const unsigned threads = options_.provision_threads;
    parts = PlanParts(stem, LayoutEndLocked(), pieces, threads, unit);
    if (Status written = WriteParts(dir, parts, pieces, threads, unit); !written) {
      return Error{written.error().code, ThisProcess() + ": host carrier: " + written.error().message};
    }
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
  if (Status found = FindParts(from, file_parts_); !found) {
    return Error{found.error().code, ThisProcess() + ": host carrier: " + found.error().message +
                                         "; the saved bytes stay in the files"};
  }
  // Load reads them from here, each unit checked as it goes to the device: one pass. A
  // folder reached only through the step's descriptor (control.cc, FolderPath) is held open.
  file_dir_ = from;
  files_folder_.reset();
  if (from.starts_with("/proc/self/fd/")) {
    UniqueFd folder(open(from.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!folder.valid()) {
      const int error = errno;
      return Error{error, ThisProcess() + ": host carrier: cannot open the folder " + from + ": " +
                              strerror(error) + "; the saved bytes stay in the files"};
    }
    file_dir_ = "/proc/self/fd/" + std::to_string(folder.get());
    files_folder_ = std::move(folder);
  }
  files_found_ = true;
  CarrierTransfer result = FileTransferLocked(FilePiecesLocked());
  result.chunks = file_parts_.size();
  result.ns = MonotonicNs() - start;
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

Status HostCarrier::SavedBytesReadable() const {
  std::lock_guard lock(mutex_);
  return ReadableLocked();
}

Status HostCarrier::ReadableLocked() const {
  if (file_parts_.empty() || files_found_) return Ok{};
  return Error{CUDA_ERROR_INVALID_VALUE,
               ThisProcess() + ": host carrier: the saved bytes are in the files " + FileNamesLocked() +
                   " (written for a dump), not in memory: READ_CARRIER brings them back before "
                   "a reallocate"};
}

}  // namespace cusnap::shim
