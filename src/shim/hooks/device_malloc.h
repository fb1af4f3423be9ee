// cuMemAlloc / cuMemAllocPitch / cuMemFree served by VMM allocations the shim owns (DESIGN.md
// "What the carrier carries"): each is a tracked POSIX-capable cuMemCreate on the
// current context's device, mapped read-write there at a VA the shim reserved, so its bytes
// go through the host carrier and it can be shared again after a restore (DRIVER-FACTS F3,
// F11). The application sees what the driver shows for cuMemAlloc memory: one range per
// allocation (cuMemGetAddressRange: the mapping), the driver's pitch, the driver's errors, and
// cuPointerGetAttribute(s) answers patched where VMM memory would differ
// (IS_LEGACY_CUDA_IPC_CAPABLE 1, ALLOWED_HANDLE_TYPES 0). legacy_memory.cc forwards the
// exported entry points here.
#pragma once

#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// cuMemAlloc_v2. A null `dptr`, a size of 0 and a call without a current context go to the
/// driver (its answer); otherwise the driver's error of the VMM call that failed
/// (CUDA_ERROR_OUT_OF_MEMORY when the device is full), nothing left behind.
CUresult ServeMemAlloc(CUdeviceptr* dptr, size_t bytesize);

/// cuMemAllocPitch_v2: the driver validates the arguments and picks the pitch (a one-row
/// allocation of the same width, freed at once); the rows are then served as ServeMemAlloc.
CUresult ServeMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned element_size);

/// cuMemFree_v2: an allocation the shim serves is unmapped, released and its VA freed; a
/// pointer inside one that is not its base is CUDA_ERROR_INVALID_VALUE (the driver's answer);
/// anything else goes to the driver.
CUresult ServeMemFree(CUdeviceptr dptr);

/// After the driver answered cuPointerGetAttribute(s) successfully for `ptr`: rewrites the
/// answers that VMM memory gives differently from cuMemAlloc memory when `ptr` is memory the
/// shim serves (a served cuMemAlloc or a legacy IPC open).
void PatchPointerAttribute(CUpointer_attribute attribute, void* data, CUdeviceptr ptr);

}  // namespace cusnap::shim
