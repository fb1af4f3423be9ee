// What the lifecycle and its unicast and multicast steps share: a recorded mapping's access
// as the driver takes it (and, for them, the clock and the process name of common/).
#pragma once

#include <array>
#include <cstdint>

#include "common/clock.h"
#include "common/protocol.h"
#include "common/text.h"
#include "shim/intercept/cuda_abi.h"

namespace cusnap::shim {

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
