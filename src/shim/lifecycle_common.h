// Small helpers the lifecycle, the host carrier and the unicast steps share: the clock their
// reply timings use, and the process name every error message starts with.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <string>

namespace cusnap::shim {

/// CLOCK_MONOTONIC in ns.
inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// "pid <pid>": how errors name this process (DESIGN.md, "Errors").
inline std::string ThisProcess() { return "pid " + std::to_string(getpid()); }

}  // namespace cusnap::shim
