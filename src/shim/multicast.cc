// Multicast hooks (placeholder: pure forwarding).
#include "shim/driver_api.h"
#include "shim/hooks.h"

namespace cusnap::shim::hook {

CUresult cuMulticastCreate(CUmemGenericAllocationHandle * mcHandle, const CUmulticastObjectProp *prop) {
  auto real = driver().cuMulticastCreate;
  return real ? real(mcHandle, prop) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  auto real = driver().cuMulticastAddDevice;
  return real ? real(mcHandle, dev) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindMem;
  return real ? real(mcHandle, mcOffset, memHandle, memOffset, size, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindMem_v2;
  return real ? real(mcHandle, dev, mcOffset, memHandle, memOffset, size, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindAddr;
  return real ? real(mcHandle, mcOffset, memptr, size, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUdeviceptr memptr, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindAddr_v2;
  return real ? real(mcHandle, dev, mcOffset, memptr, size, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  auto real = driver().cuMulticastUnbind;
  return real ? real(mcHandle, dev, mcOffset, size) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuMulticastGetGranularity(size_t * granularity, const CUmulticastObjectProp *prop, CUmulticastGranularity_flags option) {
  auto real = driver().cuMulticastGetGranularity;
  return real ? real(granularity, prop, option) : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace cusnap::shim::hook
