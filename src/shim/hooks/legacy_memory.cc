// Hooks of legacy device memory and legacy IPC: thin wrappers that pass the gate and
// forward to device_malloc.h and legacy_ipc.h; and the entry points whose memory cusnap cannot
// carry, each noted when the driver accepted it (the checkpoint refuses the process by name).
#include "shim/hooks/device_malloc.h"
#include "shim/hooks/hooks.h"
#include "shim/hooks/legacy_ipc.h"
#include "shim/driver/driver_api.h"
#include "shim/process.h"

namespace cusnap::shim::hook {
namespace {

// Forwards to the real entry point and notes `what` when it succeeded.
template <typename Real, typename... Args>
CUresult ForwardNoting(Real real, const char* what, Args... args) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = real(args...);
  if (rc == CUDA_SUCCESS) malloc_table().NoteUnsupported(what);
  return rc;
}

}  // namespace

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUSNAP_QUIESCE_GATE();
  return ServeMemAlloc(dptr, bytesize);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  CUSNAP_QUIESCE_GATE();
  return ServeMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUSNAP_QUIESCE_GATE();
  return ServeMemFree(dptr);
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  CUSNAP_QUIESCE_GATE();
  auto real = driver().cuPointerGetAttribute;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = real(data, attribute, ptr);
  if (rc == CUDA_SUCCESS) PatchPointerAttribute(attribute, data, ptr);
  return rc;
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  CUSNAP_QUIESCE_GATE();
  auto real = driver().cuPointerGetAttributes;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = real(numAttributes, attributes, data, ptr);
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < numAttributes; ++i) PatchPointerAttribute(attributes[i], data[i], ptr);
  return rc;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  CUSNAP_QUIESCE_GATE();
  return ServeIpcGetMemHandle(pHandle, dptr);
}

CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  CUSNAP_QUIESCE_GATE();
  return ServeIpcOpenMemHandle(driver().cuIpcOpenMemHandle, pdptr, handle, Flags);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  CUSNAP_QUIESCE_GATE();
  return ServeIpcOpenMemHandle(driver().cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  CUSNAP_QUIESCE_GATE();
  return ServeIpcCloseMemHandle(dptr);
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  CUSNAP_QUIESCE_GATE();
  return ForwardNoting(driver().cuMemAllocManaged, "cuMemAllocManaged (managed memory)", dptr, bytesize, flags);
}

CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType,
                                          unsigned long long flags) {
  CUSNAP_QUIESCE_GATE();
  return ForwardNoting(driver().cuMemPoolExportToShareableHandle,
                       "cuMemPoolExportToShareableHandle (a memory pool shared between processes)", handle_out,
                       pool, handleType, flags);
}

CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType handleType,
                                       unsigned long long flags) {
  CUSNAP_QUIESCE_GATE();
  return ForwardNoting(driver().cuMemGetHandleForAddressRange,
                       "cuMemGetHandleForAddressRange (a dma-buf of device memory)", handle, dptr, size,
                       handleType, flags);
}

}  // namespace cusnap::shim::hook
