// Legacy CUDA IPC of device memory served over the creators' endpoints, like a VMM
// ticket import: cuIpcGetMemHandle of memory the shim serves (device_malloc.h) returns a
// cusnap CUipcMemHandle naming the creator (pid + start time), the allocation id and size and
// a random 128-bit secret the creator checks on every export request; cuIpcOpenMemHandle of
// one imports the allocation from its creator's endpoint, maps it at a VA the shim reserved
// and keeps (same pointer, same bytes after checkpoint + restore) and counts opens as the
// driver does; cuIpcCloseMemHandle unmaps at the last close. Handles that are not cusnap's go
// to the driver (an open of one is noted, and the checkpoint refuses the process by name).
#pragma once

#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// cuIpcGetMemHandle: a cusnap handle for memory the shim serves (anywhere in it: the handle
/// names the whole allocation), the driver's answer for anything else.
CUresult ServeIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr);

/// cuIpcOpenMemHandle (both ABIs; `real` is the one the application called). For a cusnap
/// handle: CUDA_ERROR_INVALID_VALUE for flags other than 0 and
/// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CUDA_ERROR_INVALID_CONTEXT without a current context or
/// for this process's own handle, CUDA_ERROR_INVALID_HANDLE when the creator is gone or refuses
/// (wrong secret); the base of the allocation on success, read-write for the current device
/// (and every device, with the lazy peer access flag).
CUresult ServeIpcOpenMemHandle(CUresult (*real)(CUdeviceptr*, CUipcMemHandle, unsigned int),
                               CUdeviceptr* ptr, const CUipcMemHandle& handle, unsigned flags);

/// cuIpcCloseMemHandle: one open fewer of memory opened through a cusnap handle (the last
/// one unmaps it and frees its VA); the driver's answer for any other pointer.
CUresult ServeIpcCloseMemHandle(CUdeviceptr ptr);

}  // namespace cusnap::shim
