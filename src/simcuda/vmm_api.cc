// The memory entry points: virtual memory management (cuMemCreate ... cuMemRetainAllocationHandle),
// device malloc (cuMemAlloc/cuMemFree), cuMemGetAddressRange and cuMemGetInfo. The VMM calls need
// no current context (SPEC-REFERENCE K.3 #6: cuMemCreate without one is legal); cuMemAlloc and
// cuMemGetInfo act on the current context's device (CUDA_ERROR_INVALID_CONTEXT without one).
#include "api_call.h"
#include "contexts.h"
#include "devices.h"
#include "ledger.h"
#include "multicast.h"
#include "vmm.h"

namespace vmm = simcuda::vmm;

extern "C" {

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemCreate");
  return vmm::create(handle, size, prop, flags);
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  SIMCUDA_CALL_INITIALIZED("cuMemRelease");
  return vmm::release(handle);
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemAddressReserve");
  return vmm::reserve(ptr, size, alignment, addr, flags);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  SIMCUDA_CALL_INITIALIZED("cuMemAddressFree");
  return vmm::address_free(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemMap");
  if (CUresult r = simcuda::multicast::wait_before_map(handle); r != CUDA_SUCCESS) return r;
  return vmm::map(ptr, size, offset, handle, flags);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  SIMCUDA_CALL_INITIALIZED("cuMemUnmap");
  return vmm::unmap(ptr, size);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  SIMCUDA_CALL_INITIALIZED("cuMemSetAccess");
  return vmm::set_access(ptr, size, desc, count);
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetAccess");
  return vmm::get_access(flags, location, ptr);
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemExportToShareableHandle");
  if (simcuda::multicast::holds(handle)) return simcuda::multicast::export_object(shareableHandle, handle, handleType, flags);
  return vmm::export_handle(shareableHandle, handle, handleType, flags);
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  SIMCUDA_CALL_INITIALIZED("cuMemImportFromShareableHandle");
  // A multicast object's descriptor names its team memfd, not an allocation's memory.
  if (shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
      simcuda::multicast::is_object_descriptor(static_cast<int>(reinterpret_cast<intptr_t>(osHandle))))
    return simcuda::multicast::import_object(handle, static_cast<int>(reinterpret_cast<intptr_t>(osHandle)));
  return vmm::import_handle(handle, osHandle, shHandleType);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetAllocationGranularity");
  return vmm::granularity(granularity, prop, option);
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetAllocationPropertiesFromHandle");
  return vmm::properties(prop, handle);
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  SIMCUDA_CALL_INITIALIZED("cuMemRetainAllocationHandle");
  return vmm::retain(handle, addr);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetAddressRange");
  return vmm::address_range(pbase, psize, dptr);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  SIMCUDA_CALL_INITIALIZED("cuMemAlloc");
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  return vmm::device_malloc(dptr, bytesize, device);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  SIMCUDA_CALL_INITIALIZED("cuMemFree");
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;  // freeing NULL is a no-op, as in CUDA
  return vmm::device_free(dptr);
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  SIMCUDA_CALL_INITIALIZED("cuMemGetInfo");
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  size_t capacity = simcuda::config().device_memory_bytes;
  size_t used = simcuda::ledger::bytes_in_use(simcuda::devices::physical(device));  // F7
  *total = capacity;
  *free = used < capacity ? capacity - used : 0;
  return CUDA_SUCCESS;
}

}  // extern "C"
