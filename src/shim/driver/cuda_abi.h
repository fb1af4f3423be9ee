// The CUDA headers the shim compiles against, plus the few declarations newer drivers have
// that the installed headers (CUDA 13.0) lack: the device-explicit multicast bind ABI from
// CUDA 13.1 (CUDA Driver API, "Multicast Object Management": cuMulticastBindMem_v2,
// cuMulticastBindAddr_v2).
#pragma once

// Internal-API mode: every versioned name is declared as itself (cuGetProcAddress is the
// legacy 4-argument ABI, cuGetProcAddress_v2 the 5-argument one) instead of being macro-
// renamed to the newest version, which is what a library defining these symbols needs.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDART_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>

extern "C" {
CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                               CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                               unsigned long long flags);
CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                CUdeviceptr memptr, size_t size, unsigned long long flags);
CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *symbolStatus);
}
