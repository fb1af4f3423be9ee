// Multicast objects (CUDA Driver API, "Multicast Object Management"): what the rest of the
// driver needs from them. A multicast object is a team of devices shared across processes
// (multicast_team.h); in each process that holds it, it is also a VMM allocation (vmm.h, with
// `multicast` set) whose process-private scratch memory a multicast VA maps: writes through a
// multicast VA reach no member (real multimem needs kernels; simcuda_test_multimem_all_reduce
// moves data through the members instead).
#pragma once

#include "cuda_api.h"

#include <cstddef>

namespace simcuda::multicast {

/// cuMulticastGetGranularity: CU_MULTICAST_GRANULARITY_MINIMUM is the 2 MiB allocation
/// granularity (config.h); RECOMMENDED is 512 MiB, the figure NVLS drivers report on Hopper.
inline constexpr size_t kRecommendedGranularity = size_t{512} << 20;

/// This process dropped its last handle and mapping of multicast object `handle` (called by vmm
/// with its state mutex held): its bindings end (as they do when a process exits) and the
/// object's other processes see one holder less.
void forget(CUmemGenericAllocationHandle handle);
/// Multicast objects this process holds (by handle or mapping).
size_t count();

/// True when `handle` is a multicast object this process holds.
bool holds(CUmemGenericAllocationHandle handle);
/// cuMemExportToShareableHandle on a multicast object: a new descriptor (close-on-exec) of its
/// team memfd in *(int *)shareable. CUDA_ERROR_INVALID_VALUE for a null output, nonzero flags,
/// or a type that is not POSIX_FILE_DESCRIPTOR or was not in CUmulticastObjectProp::handleTypes.
CUresult export_object(void *shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags);
/// True when `fd` is a descriptor exported from a multicast object.
bool is_object_descriptor(int fd);
/// cuMemImportFromShareableHandle of such a descriptor: this process's handle of the object (the
/// same handle again when it already holds it); `fd` is not kept.
CUresult import_object(CUmemGenericAllocationHandle *handle, int fd);
/// cuMemMap of `handle` waits until every device of a multicast object's team was added (CUDA
/// docs of cuMulticastAddDevice), bounded by SIMCUDA_MULTICAST_BIND_TIMEOUT_MS:
/// CUDA_ERROR_TIMEOUT then. CUDA_SUCCESS at once for any other handle.
CUresult wait_before_map(CUmemGenericAllocationHandle handle);

}  // namespace simcuda::multicast
