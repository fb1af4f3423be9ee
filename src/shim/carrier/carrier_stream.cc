// A dump's carrier streamed between the device and its files (carrier.h, Save to a stem and
// Load; DESIGN.md "Images"): through one small pinned buffer per I/O thread (kStreamBuffer),
// each unit digested as it is written and checked as it is read (carrier_file.h,
// StreamWriteParts, StreamReadParts). Every byte crosses host memory once, and no arena is provided: a dump
// took the arena's provisioning (9.3 GB/s), the copies into it and the files' writes one
// after the other, and a restore the same backwards.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"
#include "shim/carrier/carrier.h"
#include "shim/carrier/carrier_transfer.h"
#include "shim/driver/context_scope.h"

namespace cusnap::shim {

/// The device side of one streamed transfer: each I/O thread's buffer (mapped and pinned by
/// that thread at its first unit, so threads pin at once) and its copy stream per context.
/// Copies run on the I/O thread and are waited for there: a unit's copy (about 1 ms for
/// 64 MiB) is short beside its read or write.
class HostCarrier::DeviceStream final : public UnitCopier {
 public:
  DeviceStream(HostCarrier& carrier, Transfer& t, unsigned threads, size_t buffer_bytes)
      : carrier_(carrier), t_(t), to_device_(t.direction == Direction::kToDevice),
        buffer_bytes_(buffer_bytes), threads_(threads) {
    for (auto& thread : threads_) {
      thread.streams.assign(t.groups.size(), nullptr);
      thread.unsynced.assign(t.groups.size(), 0);
    }
    group_of_.resize(t.slots.size());
    for (size_t g = 0; g < t.groups.size(); ++g) {
      for (size_t i : t.groups[g].slots) group_of_[i] = g;
    }
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  Result<std::byte*> Buffer(unsigned thread) override {
    Result<std::byte*> buffer = MakeBuffer(threads_[thread]);
    if (!buffer) failed_ = true;
    return buffer;
  }

  Status Copy(unsigned thread, uint64_t offset, size_t bytes, std::byte* buffer) override {
    Status copied = CopyUnit(threads_[thread], offset, bytes, buffer);
    if (!copied) failed_ = true;
    return copied;
  }

  size_t buffer_bytes() const override { return buffer_bytes_; }

  /// True once Buffer or Copy failed: the stream's error is the device side's, not a file's.
  bool failed() const { return failed_; }

 private:
  struct Thread {
    std::byte* buffer = nullptr;
    CUcontext pinned_in = nullptr;
    std::vector<CUstream> streams;  // per group
    std::vector<char> unsynced;     // per group: its stream's synchronize failed
  };

  const DriverApi& api() const { return carrier_.api_; }

  Result<std::byte*> MakeBuffer(Thread& own) {
    if (own.buffer != nullptr) return own.buffer;
    void* mapped = mmap(nullptr, buffer_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (mapped == MAP_FAILED) {
      return Error{errno, ThisProcess() + ": host carrier: cannot map a " +
                              std::to_string(buffer_bytes_) + "-byte buffer to stream its carrier "
                              "files through: " + strerror(errno)};
    }
    madvise(mapped, buffer_bytes_, MADV_HUGEPAGE);  // fewer pages to pin; a hint only
    const CarrierSlot& first = t_.slots[t_.groups.front().slots.front()];
    ContextScope scope(api(), first.context);
    const CUresult r = scope.status() != CUDA_SUCCESS
                           ? scope.status()
                           : api().cuMemHostRegister_v2(mapped, buffer_bytes_,
                                                        CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS) {
      munmap(mapped, buffer_bytes_);
      return CarrierDriverError(api(), r, "pinning a " + std::to_string(buffer_bytes_) +
                                              "-byte buffer to stream its carrier files through");
    }
    own.buffer = static_cast<std::byte*>(mapped);
    own.pinned_in = first.context;
    return own.buffer;
  }

  Status CopyUnit(Thread& own, uint64_t offset, size_t bytes, std::byte* buffer) {
    const std::vector<Placement>& layout = carrier_.layout_;
    // The placement holding `offset`: the last one that starts at or before it.
    size_t i = static_cast<size_t>(
        std::upper_bound(layout.begin(), layout.end(), offset,
                         [](uint64_t o, const Placement& p) { return o < p.offset; }) -
        layout.begin());
    i = i == 0 ? 0 : i - 1;
    std::vector<size_t> used;
    for (uint64_t at = offset; at < offset + bytes;) {
      if (i >= layout.size()) {
        return Error{EINVAL, ThisProcess() + ": host carrier: its carrier files hold bytes [" +
                                 std::to_string(at) + ", " + std::to_string(offset + bytes) +
                                 ") that no saved allocation holds"};
      }
      const Placement& place = layout[i];
      if (at >= place.offset + place.size) {
        ++i;
        continue;
      }
      at = std::max<uint64_t>(at, place.offset);  // the padding between two allocations
      const size_t n = static_cast<size_t>(std::min<uint64_t>(offset + bytes, place.offset + place.size) - at);
      const size_t g = group_of_[i];
      ContextScope scope(api(), t_.groups[g].context);
      if (scope.status() != CUDA_SUCCESS) {
        return CarrierDriverError(api(), scope.status(), "entering a context");
      }
      CUstream& stream = own.streams[g];
      if (stream == nullptr) {
        if (CUresult r = api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
          stream = nullptr;
          return CarrierDriverError(api(), r, "creating a copy stream");
        }
      }
      const CUdeviceptr device = t_.staging[i].va + (at - place.offset);
      std::byte* host = buffer + (at - offset);
      const CUresult r = to_device_ ? api().cuMemcpyHtoDAsync_v2(device, host, n, stream)
                                    : api().cuMemcpyDtoHAsync_v2(host, device, n, stream);
      if (r != CUDA_SUCCESS) {
        const std::string what = ChunkText(at - place.offset, n) + SlotText(t_.slots[i]);
        return Wait(own, used, CarrierDriverError(api(), r, to_device_ ? "restoring " + what + " from its carrier file"
                                                                       : "copying " + what + " to its carrier file"));
      }
      if (std::find(used.begin(), used.end(), g) == used.end()) used.push_back(g);
      at += n;
    }
    return Wait(own, used, Ok{});
  }

 public:
  /// Once every reading thread ended: destroys the copy streams and gives the buffers back;
  /// a stream whose synchronize failed is kept with its context's staging mappings
  /// (unsynced_, SettleLocked), and then the buffers stay, pinned, since the device may
  /// still read them.
  void Finish() {
    bool all_synced = true;
    for (Thread& own : threads_) {
      for (size_t g = 0; g < own.streams.size(); ++g) {
        if (own.streams[g] == nullptr) continue;
        CopyGroup& group = t_.groups[g];
        if (own.unsynced[g]) {
          all_synced = false;
          Unsynced& kept = carrier_.unsynced_.emplace_back(Unsynced{group.context, own.streams[g], {}});
          for (size_t i : group.slots) {
            kept.staging.push_back(t_.staging[i]);
            t_.staging[i] = Staging{};
          }
          group.synced = false;
          continue;
        }
        ContextScope scope(api(), group.context);
        api().cuStreamDestroy_v2(own.streams[g]);
      }
    }
    if (!all_synced) {
      CUSNAP_LOG_WARN("host carrier: a copy of its stream buffers may still run: the buffers stay");
      return;
    }
    for (Thread& own : threads_) {
      if (own.buffer == nullptr) continue;
      ContextScope scope(api(), own.pinned_in);
      if (scope.status() != CUDA_SUCCESS || api().cuMemHostUnregister(own.buffer) != CUDA_SUCCESS) {
        continue;  // still pinned: not given back to the kernel under the driver
      }
      munmap(own.buffer, buffer_bytes_);
    }
  }

 private:
  // Synchronizes the streams of `used` groups, so the buffer can take the next unit; the
  // first failure (`status` first) is returned, a failed synchronize marked.
  Status Wait(Thread& own, const std::vector<size_t>& used, Status status) {
    for (size_t g : used) {
      ContextScope scope(api(), t_.groups[g].context);
      const CUresult r = scope.status() == CUDA_SUCCESS ? api().cuStreamSynchronize(own.streams[g])
                                                        : scope.status();
      if (r == CUDA_SUCCESS) continue;
      own.unsynced[g] = 1;
      if (status) status = CarrierDriverError(api(), r, "synchronizing the copies of a carrier file");
    }
    return status;
  }

  HostCarrier& carrier_;
  Transfer& t_;
  const bool to_device_;  // a Load: buffer to device; a Save: device to buffer
  const size_t buffer_bytes_;
  std::vector<Thread> threads_;
  std::vector<size_t> group_of_;  // per slot
  std::atomic<bool> failed_{false};
};

unsigned HostCarrier::StreamThreads() const {
  return static_cast<unsigned>(
      std::clamp<size_t>(options_.ring_bytes / StreamBufferBytes(), 1, options_.provision_threads));
}

void HostCarrier::ForEachZeroChunk(Transfer& t, const std::function<void(CopyGroup&, size_t, size_t, size_t)>& each) {
  const size_t chunk = options_.chunk_bytes;
  for (CopyGroup& group : t.groups) {
    for (size_t i : group.slots) {
      const Placement& place = layout_[i];
      t.result.bytes += place.size;
      for (size_t c = 0; c < place.zero.size(); ++c) {
        if (!place.zero[c]) continue;
        const size_t offset = c * chunk;
        const size_t bytes = std::min(chunk, place.size - offset);
        t.result.zero_bytes += bytes;
        each(group, i, offset, bytes);
      }
    }
  }
}

void HostCarrier::StreamToFilesLocked(Transfer& t, const std::string& stem_path) {
  const uint64_t phase = MonotonicNs();
  ForEachZeroChunk(t, [](CopyGroup&, size_t, size_t, size_t) {});  // holes: nothing to copy
  const auto [dir, stem] = SplitStemPath(stem_path);
  const std::vector<FilePiece> pieces = FilePiecesLocked();
  const size_t unit = FileUnitBytes();
  std::vector<FilePart> parts = PlanParts(stem, LayoutEndLocked(), pieces, options_.provision_threads, unit);
  if (!t.failure) {
    DeviceStream stream(*this, t, StreamThreads(), StreamBufferBytes());
    Status written = StreamWriteParts(dir, parts, pieces, StreamThreads(), unit, stream);
    stream.Finish();
    if (!written) {
      const std::string& message = written.error().message;
      t.failure = Error{written.error().code,
                        message.starts_with(ThisProcess()) ? message
                                                           : ThisProcess() + ": host carrier: " + message};
    } else {
      // Found where they were written; a reallocate in place is told where they are first
      // (kReadCarrier), since `dir` may be a descriptor's path that ends with the step.
      file_parts_ = std::move(parts);
      file_dir_ = dir;
      files_found_ = false;
      t.result.chunks = file_parts_.size();
    }
  }
  SynchronizeLocked(t);
  t.result.copy_ns = MonotonicNs() - phase;
}

void HostCarrier::StreamFromFilesLocked(Transfer& t) {
  const uint64_t phase = MonotonicNs();
  // All-zero chunks are holes in the files: a memset on the context's own stream.
  ForEachZeroChunk(t, [&](CopyGroup& group, size_t i, size_t offset, size_t bytes) {
    if (t.failure) return;
    ContextScope scope(api_, group.context);
    const CUresult r = scope.status() != CUDA_SUCCESS
                           ? scope.status()
                           : api_.cuMemsetD8Async(t.staging[i].va + offset, 0, bytes, group.stream);
    if (r != CUDA_SUCCESS) t.Fail(api_, r, "zeroing " + ChunkText(offset, bytes) + SlotText(t.slots[i]));
  });
  if (!t.failure) {
    const size_t unit = FileUnitBytes();
    const unsigned threads = StreamThreads();
    DeviceStream stream(*this, t, threads, StreamBufferBytes());
    const std::vector<FilePiece> pieces = FilePiecesLocked();
    Status read = StreamReadParts(file_dir_, file_parts_, pieces, threads, unit, stream);
    stream.Finish();
    if (!read) {
      const std::string& message = read.error().message;
      // The copier's errors name the process already; the files' do not.
      t.failure = Error{stream.failed() ? read.error().code : kCarrierFileUnreadable,
                        (message.starts_with(ThisProcess()) ? message
                                                            : ThisProcess() + ": host carrier: " + message) +
                            "; the saved bytes stay in the files"};
    }
    for (const FilePart& part : file_parts_) t.result.chunks += part.chunks.size();
  }
  SynchronizeLocked(t);
  t.result.copy_ns = MonotonicNs() - phase;
}

}  // namespace cusnap::shim
