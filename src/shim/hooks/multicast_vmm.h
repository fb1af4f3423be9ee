// The multicast side of the generic VMM entry points (SPEC-REFERENCE C.2, "Generic
// consumers"): vmm.cc hands a multicast logical handle, or a VA range that a multicast
// mapping covers, to these functions; ticket_import.cc hands them multicast tickets. Each
// enters the quiesce gate itself and never holds the multicast table's lock across a driver
// call (cuMemMap of a multicast object waits until the whole team was added).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/driver/cuda_abi.h"
#include "shim/tables/multicast_table.h"

namespace cusnap::shim {

/// cuMemMap of multicast logical `handle`: maps its real handle, records the mapping and
/// grows the object's extent. CUDA_ERROR_INVALID_HANDLE for an unknown handle,
/// CUDA_ERROR_NOT_READY while the lifecycle holds no real handle, else the driver's result.
CUresult MulticastMap(CUdeviceptr ptr, size_t size, size_t offset, uint64_t handle,
                      unsigned long long flags);
/// cuMemUnmap of a range that covers whole multicast mappings (the mapping's VA reservation
/// stays the application's); releases objects that lost their last reference.
CUresult MulticastUnmap(CUdeviceptr ptr, size_t size);
/// cuMemSetAccess of a range that covers whole multicast mappings: access merged per
/// location; CUDA_ERROR_NOT_SUPPORTED beyond proto::kMaxAccess locations.
CUresult MulticastSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                            size_t count);
/// cuMemRelease of multicast logical `handle`; CUDA_ERROR_INVALID_HANDLE when unknown.
CUresult MulticastRelease(uint64_t handle);
/// cuMemRetainAllocationHandle at an address inside a multicast mapping: the logical handle
/// it was mapped with, one more reference. CUDA_ERROR_INVALID_VALUE when it was unmapped
/// meanwhile.
CUresult MulticastRetain(CUmemGenericAllocationHandle* handle, CUdeviceptr address);
/// cuMemGetAllocationPropertiesFromHandle of multicast logical `handle`, answered by the
/// driver for the real handle.
CUresult MulticastAllocationProperties(CUmemAllocationProp* prop, uint64_t handle);

}  // namespace cusnap::shim
