// Small helpers the lifecycle, the host carrier and the unicast and multicast steps share: the
// clock their reply timings use, the process name every error message starts with, and a
// recorded mapping's access as the driver takes it.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdint>
#include <ctime>
#include <string>

#include "common/protocol.h"
#include "common/text.h"
#include "shim/intercept/cuda_abi.h"

namespace cusnap::shim {

/// CLOCK_MONOTONIC in ns.
inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

/// "pid <pid>": how errors name this process (DESIGN.md, "Errors").
inline std::string ThisProcess() { return ProcessText(getpid()); }

/// The first `m.access_count` access records of a recorded mapping (unicast or multicast) as
/// cuMemSetAccess takes them. CUmemAccessDesc is not the wire's AccessRecord (SPEC-REFERENCE
/// K.3 #17): field by field. Ordinals are used as recorded: a restore keeps a process's
/// ordinals (DRIVER-FACTS F7; docs/MEASURED.md M1).
template <typename Mapping>
std::array<CUmemAccessDesc, proto::kMaxAccess> AccessDescs(const Mapping& m) {
  std::array<CUmemAccessDesc, proto::kMaxAccess> access{};
  for (uint32_t i = 0; i < m.access_count && i < proto::kMaxAccess; ++i) {
    access[i].location.type = static_cast<CUmemLocationType>(m.access[i].location_type);
    access[i].location.id = m.access[i].location_id;
    access[i].flags = static_cast<CUmemAccess_flags>(m.access[i].flags);
  }
  return access;
}

}  // namespace cusnap::shim
