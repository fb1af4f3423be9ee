// Logical handles: the values the application sees for the allocations the shim tracks
// (DESIGN.md, "Handles"). The top 16 bits are a fixed tag, the low 48 bits a per-process
// counter starting at 1; a logical handle stays the same across checkpoint and restore
// while the real driver handle behind it changes.
#pragma once

#include <cstdint>

namespace cusnap::shim {

inline constexpr uint64_t kLogicalTag = 0xC5A9ull << 48;
inline constexpr uint64_t kLogicalTagMask = 0xFFFFull << 48;
inline constexpr uint64_t kLogicalCounterMask = ~kLogicalTagMask;

/// True when `handle` carries the logical tag. A tagged value the table does not know gets
/// CUDA_ERROR_INVALID_HANDLE and is never forwarded; a real driver handle that happens to
/// carry the tag is released and refused the same way (it would be ambiguous).
inline bool IsTagged(uint64_t handle) { return (handle & kLogicalTagMask) == kLogicalTag; }

/// Mints logical handle values. Not thread-safe by itself: each table calls it under its
/// lock.
class LogicalHandleCounter {
 public:
  /// Values tag | `bits` | counter, the counter running from 1 to `last`.
  explicit LogicalHandleCounter(uint64_t bits = 0, uint64_t last = kLogicalCounterMask)
      : bits_(bits), last_(last) {}

  /// The next logical handle (tag | bits | counter), or 0 once `last` values were handed out.
  uint64_t Next();

 private:
  uint64_t bits_;
  uint64_t last_;
  uint64_t next_ = 1;
};

}  // namespace cusnap::shim
