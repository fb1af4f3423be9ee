// Multicast hooks. Multicast objects are forwarded untracked until the multicast issue;
// what is tracked already is the member side: a logical handle given to cuMulticastBindMem
// is translated to its real handle (pinned for the call, which may block until the whole
// team has joined, so never under the table lock). Addresses (BindAddr) pass as they are.
#include "shim/driver_api.h"
#include "shim/handles.h"
#include "shim/hooks.h"
#include "shim/process.h"

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
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!IsTagged(memHandle)) return real(mcHandle, mcOffset, memHandle, memOffset, size, flags);
  PinScope member(memHandle);
  if (!member) return CUDA_ERROR_INVALID_HANDLE;
  if (!member->has_real) return CUDA_ERROR_NOT_READY;
  return real(mcHandle, mcOffset, member->real, memOffset, size, flags);
}

CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindMem_v2;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!IsTagged(memHandle)) return real(mcHandle, dev, mcOffset, memHandle, memOffset, size, flags);
  PinScope member(memHandle);
  if (!member) return CUDA_ERROR_INVALID_HANDLE;
  if (!member->has_real) return CUDA_ERROR_NOT_READY;
  return real(mcHandle, dev, mcOffset, member->real, memOffset, size, flags);
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
