// Unicast VMM hooks (placeholder: pure forwarding until the sharing table lands).
#include "shim/driver_api.h"
#include "shim/hooks.h"

namespace cusnap::shim::hook {

CUresult cuMemCreate(CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags) {
  auto real = driver().cuMemCreate;
  return real ? real(handle, size, prop, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto real = driver().cuMemRelease;
  return real ? real(handle) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle * handle, void *addr) {
  auto real = driver().cuMemRetainAllocationHandle;
  return real ? real(handle, addr) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto real = driver().cuMemMap;
  return real ? real(ptr, size, offset, handle, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto real = driver().cuMemUnmap;
  return real ? real(ptr, size) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  auto real = driver().cuMemSetAccess;
  return real ? real(ptr, size, desc, count) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
  auto real = driver().cuMemGetAccess;
  return real ? real(flags, location, ptr) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType, unsigned long long flags) {
  auto real = driver().cuMemExportToShareableHandle;
  return real ? real(shareableHandle, handle, handleType, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle * handle, void *osHandle, CUmemAllocationHandleType shHandleType) {
  auto real = driver().cuMemImportFromShareableHandle;
  return real ? real(handle, osHandle, shHandleType) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp * prop, CUmemGenericAllocationHandle handle) {
  auto real = driver().cuMemGetAllocationPropertiesFromHandle;
  return real ? real(prop, handle) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr * pbase, size_t *psize, CUdeviceptr dptr) {
  auto real = driver().cuMemGetAddressRange_v2;
  return real ? real(pbase, psize, dptr) : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace cusnap::shim::hook
