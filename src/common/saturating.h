// Saturating arithmetic for deadlines: a value from the environment or the wire may be as
// large as its type allows, and a deadline that would not fit is one never reached.
#pragma once

#include <cstdint>

namespace cusnap {

/// `a + b`, or UINT64_MAX where the sum would not fit.
inline constexpr uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/// `ms` in ns, or UINT64_MAX where that would not fit.
inline constexpr uint64_t SaturatingMsToNs(uint64_t ms) {
  return ms > UINT64_MAX / 1'000'000 ? UINT64_MAX : ms * 1'000'000;
}

}  // namespace cusnap
