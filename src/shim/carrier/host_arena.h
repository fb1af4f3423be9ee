// The carrier's host memory: one anonymous mapping on transparent huge pages, 2 MiB aligned,
// provided (first-touched) by several threads at once. DRIVER-FACTS "Host memory for a
// carrier": with MADV_HUGEPAGE, touching runs at 31 GB/s (11 GB/s on 4 KiB pages) and
// cuMemHostRegister at 47 GB/s (19.5); a buffer allocated by the driver is 10x slower to
// provide. Not thread-safe: the carrier's lock guards it.
#pragma once

#include <cstddef>

#include "common/error.h"

namespace cusnap::shim {

/// Grown in whole 2 MiB steps: the VMM granularity, and the huge-page size.
inline constexpr size_t kArenaStep = size_t{2} << 20;

/// Host memory for the carrier's bytes.
class HostArena {
 public:
  HostArena() = default;
  /// Unmaps the arena unless Abandon() was called.
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  /// Grows to at least `bytes` (rounded up to 2 MiB) and touches every new page with up to
  /// `threads` threads, so that copies never wait for the kernel. Grows in place when it
  /// can; otherwise maps afresh and the old contents are dropped (callers grow only while
  /// the arena holds nothing they need). Errors: errno (ENOMEM) naming both sizes.
  Status Grow(size_t bytes, unsigned threads);
  /// Returns every byte past `bytes` (rounded up to 2 MiB) to the kernel; 0 frees it all.
  void ShrinkTo(size_t bytes);
  /// Forgets the mapping without unmapping it: a device may still write into it.
  void Abandon();

  std::byte* data() const { return data_; }
  /// Bytes mapped and touched.
  size_t capacity() const { return capacity_; }

 private:
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

/// First-touches [begin, begin + bytes) with up to `threads` threads (the caller is one of
/// them; a thread that cannot be started leaves its share to the caller). Exposed for the
/// bench and tests.
void TouchPages(std::byte* begin, size_t bytes, unsigned threads);

}  // namespace cusnap::shim
