// Legacy CUDA IPC of device memory (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle,
// CUDA Driver API "Memory Management") and what cuPointerGetAttribute(s) answer about device
// memory. A simcuda CUipcMemHandle names the creator (pid), the descriptor number of the
// allocation's memfd in the creator, and the allocation (id, size); the opener reopens the memfd
// through /proc/<pid>/fd (the same-user access the kernel grants), checks the id, and maps it
// at a fresh VA. A process that holds an opened handle at a native checkpoint cannot be restored
// (DRIVER-FACTS F11: restore CUDA_ERROR_INVALID_VALUE, the process stays CHECKPOINTED).
#pragma once

#include "cuda_api.h"
#include "vmm.h"

#include <cstdint>

namespace simcuda::vmm {

/// cuIpcGetMemHandle: `ptr` anywhere in a cuMemAlloc allocation of this process names the whole
/// allocation. CUDA_ERROR_INVALID_VALUE for anything else (VMM memory, an opened handle, host
/// memory, an allocation that went through a native checkpoint, which keeps no memfd).
CUresult ipc_get_mem_handle(CUipcMemHandle *handle, CUdeviceptr ptr);
/// cuIpcOpenMemHandle: the base of the creator's allocation mapped here read-write for
/// `device` (the current one), or every device with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS; the same handle opened again returns the same pointer and counts one more open.
/// `flags` 0 or CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, else CUDA_ERROR_INVALID_VALUE; a handle
/// that is not a simcuda one CUDA_ERROR_INVALID_VALUE; one of this process
/// CUDA_ERROR_INVALID_CONTEXT; one whose creator or allocation is gone
/// CUDA_ERROR_INVALID_HANDLE.
CUresult ipc_open_mem_handle(CUdeviceptr *ptr, const CUipcMemHandle &handle, unsigned flags, int device);
/// cuIpcCloseMemHandle: one open fewer of the handle opened at `ptr` (exactly the pointer
/// open returned, else CUDA_ERROR_INVALID_VALUE); the last one unmaps it.
CUresult ipc_close_mem_handle(CUdeviceptr ptr);
/// Whether the process holds memory opened from an IPC handle (DRIVER-FACTS F11).
bool holds_ipc_opened(State &s);

/// What the driver knows about the device memory at a pointer.
struct PointerFacts {
  CUdeviceptr base = 0;
  size_t size = 0;
  uint64_t buffer_id = 0;
  int device = -1;            // ordinal; -1 for host memory
  bool legacy_ipc_capable = false;  // cuMemAlloc memory
  unsigned long long handle_types = 0;
  unsigned access = 0;        // of `device_for_access`
};
/// Facts about `ptr` with the access of `device_for_access`; CUDA_ERROR_INVALID_VALUE when
/// `ptr` is in no mapping.
CUresult pointer_facts(CUdeviceptr ptr, int device_for_access, PointerFacts *facts);

}  // namespace simcuda::vmm
