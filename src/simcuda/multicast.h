// Multicast objects (CUDA Driver API, "Multicast Object Management"), in-process for now: a
// team of devices, the memory bound to it per device, and the object's own memory that
// cuMemMap maps at a multicast VA. A bind waits (bounded) until every device of the team was
// added, as on real hardware (DRIVER-FACTS, public reports). Writes through a multicast VA are
// not broadcast to the bound memory.
#pragma once

#include "cuda_api.h"

namespace simcuda::multicast {

/// Forgets the team of a multicast object whose memory was freed (called by vmm with its
/// state mutex held).
void forget(CUmemGenericAllocationHandle handle);
/// Number of multicast objects alive in this process.
size_t count();

}  // namespace simcuda::multicast
