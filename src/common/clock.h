// The clock every timing and deadline in cusnap reads: CLOCK_MONOTONIC, in ns.
#pragma once

#include <time.h>

#include <cstdint>

namespace cusnap {

/// CLOCK_MONOTONIC now, in ns (never goes back; unaffected by changes of the wall clock).
inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace cusnap
