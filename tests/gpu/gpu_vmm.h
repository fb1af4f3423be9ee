// VMM building blocks for the GPU test programs: POSIX-capable allocations (the kind the
// shim tracks, DESIGN.md "Handles"), reserve + map + access, export and import of POSIX
// descriptors. Every call is checked (a failure ends the program with the call's name).
#pragma once

#include <cuda.h>

#include <cstddef>

namespace gpu {

/// Properties of a pinned POSIX-capable allocation at `type`/`id` (a device ordinal for
/// CU_MEM_LOCATION_TYPE_DEVICE, a host NUMA node for CU_MEM_LOCATION_TYPE_HOST_NUMA).
CUmemAllocationProp PosixProp(CUmemLocationType type, int id);

/// Minimum allocation granularity (bytes) for `prop` (cuMemGetAllocationGranularity).
size_t Granularity(const CUmemAllocationProp& prop);

/// Minimum granularity (bytes) of POSIX-capable device memory on `device`.
size_t Granularity(int device);

/// The host NUMA node closest to `device` (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID; 0 when the
/// system reports none), or -1 when the device cannot create HOST_NUMA VMM allocations.
int HostNumaNode(int device);

/// cuMemCreate of `bytes` (a multiple of the granularity) with `prop`.
CUmemGenericAllocationHandle CreateAllocation(size_t bytes, const CUmemAllocationProp& prop);

/// `bytes` rounded up to `granularity`.
size_t RoundUp(size_t bytes, size_t granularity);

/// cuMemCreate of `bytes` (a multiple of the granularity) of pinned device memory on
/// `device`, requesting POSIX file-descriptor handles.
CUmemGenericAllocationHandle CreatePosixAllocation(size_t bytes, int device);

/// Reserves a VA range of `bytes`, maps `handle` at offset 0 over all of it and grants
/// read-write access to `access_device`. Returns the VA.
CUdeviceptr MapWithAccess(CUmemGenericAllocationHandle handle, size_t bytes, int access_device);

/// Unmaps [va, va + bytes) and frees the VA reservation.
void UnmapAndFree(CUdeviceptr va, size_t bytes);

/// cuMemExportToShareableHandle as a POSIX descriptor (with the shim loaded: a ticket).
int ExportPosix(CUmemGenericAllocationHandle handle);

/// cuMemImportFromShareableHandle of a POSIX descriptor (the caller still owns `fd`).
CUmemGenericAllocationHandle ImportPosix(int fd);

}  // namespace gpu
