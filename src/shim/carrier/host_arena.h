// The carrier's host memory: one anonymous mapping on transparent huge pages, 2 MiB aligned,
// provided (first-touched) by several threads at once. DRIVER-FACTS "Host memory for a
// carrier": with MADV_HUGEPAGE, touching runs at 31 GB/s (11 GB/s on 4 KiB pages) and
// cuMemHostRegister at 47 GB/s (19.5); a buffer allocated by the driver is 10x slower to
// provide. Not thread-safe: the carrier's lock guards it.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace cusnap::shim {

/// Grown in whole 2 MiB steps: the VMM granularity, and the huge-page size.
inline constexpr size_t kArenaStep = size_t{2} << 20;

/// First-touches a range on threads of its own, in address order, one kTouchUnit at a time,
/// while the caller goes on: the carrier registers and copies the first units while later
/// ones are still being provided (a cold save overlaps providing with copying).
class BackgroundTouch {
 public:
  /// Bytes one thread touches at a time.
  static constexpr size_t kTouchUnit = size_t{64} << 20;
  /// Starts up to `threads` threads on [begin, begin + bytes) (signals blocked on them; a
  /// thread that cannot be started is one fewer: with none, the constructor touches it all).
  BackgroundTouch(std::byte* begin, size_t bytes, unsigned threads);
  /// Joins the threads (every page is touched then).
  ~BackgroundTouch();
  BackgroundTouch(const BackgroundTouch&) = delete;
  BackgroundTouch& operator=(const BackgroundTouch&) = delete;

  /// Blocks until every page of [at, at + bytes) inside the range is touched.
  void WaitTouched(const std::byte* at, size_t bytes);

 private:
  void Work();

  std::byte* const begin_;
  const size_t bytes_;
  std::mutex mutex_;
  std::condition_variable touched_;
  size_t next_unit_ = 0;        // the next unit a thread takes
  std::vector<char> done_;      // per unit
  std::vector<pthread_t> threads_;
};

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
  /// Grow, but returns once the memory is mapped: the new pages are touched in the
  /// background (WaitTouched, FinishTouching); the arena is usable at once, a range that is
  /// not touched yet costs its copy or registration the kernel's page faults only.
  Status GrowInBackground(size_t bytes, unsigned threads);
  /// Blocks until [at, at + bytes) is touched (at once when no background touch runs).
  void WaitTouched(const std::byte* at, size_t bytes);
  /// Waits for the background touch, if any, to finish; returns how long it waited, ns.
  uint64_t FinishTouching();
  /// Returns every byte past `bytes` (rounded up to 2 MiB) to the kernel; 0 frees it all.
  void ShrinkTo(size_t bytes);
  /// Forgets the mapping without unmapping it: a device may still write into it.
  void Abandon();

  std::byte* data() const { return data_; }
  /// Bytes mapped and touched.
  size_t capacity() const { return capacity_; }

 private:
  // Maps and advises [capacity_, bytes): returns where the fresh pages begin.
  Result<size_t> MapMore(size_t bytes);

  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
  std::unique_ptr<BackgroundTouch> touch_;  // the growth's pages still being touched
};

/// First-touches [begin, begin + bytes) with up to `threads` threads (the caller is one of
/// them; a thread that cannot be started leaves its share to the caller). Exposed for the
/// bench and tests.
void TouchPages(std::byte* begin, size_t bytes, unsigned threads);

}  // namespace cusnap::shim
