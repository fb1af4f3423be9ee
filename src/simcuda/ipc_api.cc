// The legacy IPC memory entry points (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle),
// cuMemAllocPitch, cuMemAllocManaged (pools and dma-buf export: not supported), and
// cuPointerGetAttribute(s) (CUDA Driver API, "Memory Management" and
// "Unified Addressing"). IPC events are in streams.cc, with the other events.
#include "api_call.h"
#include "contexts.h"
#include "vmm.h"
#include "vmm_ipc.h"

#include <cstring>

namespace vmm = simcuda::vmm;

namespace {

// Pitches are multiples of this (CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT on current GPUs).
constexpr size_t kPitchAlignment = 512;

// Writes one attribute of `facts` (found: `ptr` is device memory) into `data`.
// CUDA_ERROR_INVALID_VALUE for an attribute device memory has no value for.
CUresult attribute_value(void *data, CUpointer_attribute attribute, CUdeviceptr ptr, const vmm::PointerFacts &facts) {
  auto put = [data](auto value) {
    std::memcpy(data, &value, sizeof value);
    return CUDA_SUCCESS;
  };
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext context = nullptr;
      cuCtxGetCurrent(&context);
      return put(context);
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return put(static_cast<unsigned>(facts.device >= 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST));
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return put(ptr);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return put(0u);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return put(static_cast<unsigned long long>(facts.buffer_id));
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return put(0u);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return put(facts.device >= 0 ? facts.device : 0);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return put(facts.legacy_ipc_capable ? 1u : 0u);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return put(facts.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return put(facts.size);
    case CU_POINTER_ATTRIBUTE_MAPPED: return put(1u);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return put(facts.handle_types);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: return put(0u);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return put(static_cast<unsigned>(facts.access));
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return put(static_cast<CUmemoryPool>(nullptr));
    default: return CUDA_ERROR_INVALID_VALUE;  // HOST_POINTER, P2P_TOKENS, ... of device memory
  }
}

CUresult facts_of(CUdeviceptr ptr, vmm::PointerFacts *facts) {
  int device = -1;
  if (simcuda::contexts::current_device(&device) != CUDA_SUCCESS) device = -1;
  return vmm::pointer_facts(ptr, device, facts);
}

}  // namespace

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  SIMCUDA_CALL_INITIALIZED("cuIpcGetMemHandle");
  return vmm::ipc_get_mem_handle(pHandle, dptr);
}

// The CUDA 4.1 ABI and the CUDA 11.0 one are the same function.
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuIpcOpenMemHandle");
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  return vmm::ipc_open_mem_handle(pdptr, handle, Flags, device);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuIpcOpenMemHandle");
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  return vmm::ipc_open_mem_handle(pdptr, handle, Flags, device);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  SIMCUDA_CALL_INITIALIZED("cuIpcCloseMemHandle");
  return vmm::ipc_close_mem_handle(dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  SIMCUDA_CALL_INITIALIZED("cuMemAllocPitch");
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  const size_t pitch = (WidthInBytes + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  if (CUresult r = vmm::device_malloc(dptr, pitch * Height, device); r != CUDA_SUCCESS) return r;
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

// Managed memory, modelled as device memory of the current device (the simulated device memory
// is host memory every process thread can touch anyway); flags as CUDA checks them.
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemAllocManaged");
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  return vmm::device_malloc(dptr, bytesize, device);
}

// No memory pools and no dma-buf here: both answer CUDA_ERROR_NOT_SUPPORTED.
CUresult cuMemPoolExportToShareableHandle(void *, CUmemoryPool, CUmemAllocationHandleType, unsigned long long) {
  SIMCUDA_CALL_INITIALIZED("cuMemPoolExportToShareableHandle");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuMemGetHandleForAddressRange(void *, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetHandleForAddressRange");
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  SIMCUDA_CALL_INITIALIZED("cuPointerGetAttribute");
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  vmm::PointerFacts facts;
  if (CUresult r = facts_of(ptr, &facts); r != CUDA_SUCCESS) return r;  // not device memory
  return attribute_value(data, attribute, ptr, facts);
}

// Unlike cuPointerGetAttribute, a pointer the driver does not know is no error: every
// attribute reads as zero (CUDA Driver API).
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                CUdeviceptr ptr) {
  SIMCUDA_CALL_INITIALIZED("cuPointerGetAttributes");
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  vmm::PointerFacts facts;
  const bool known = facts_of(ptr, &facts) == CUDA_SUCCESS;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const size_t width = attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES ||
                                 attributes[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
                             ? 8
                             : 4;
    if (!known || attribute_value(data[i], attributes[i], ptr, facts) != CUDA_SUCCESS) std::memset(data[i], 0, width);
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
