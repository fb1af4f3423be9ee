// The CUDA driver API as simcuda implements it: cuda.h in internal-API mode, so every
// versioned name is declared as itself (cuMemAlloc_v2, cuGetProcAddress legacy 4-argument and
// cuGetProcAddress_v2, cuMemcpyHtoD_v2_ptds, ...) and the library exports the same ELF names
// as NVIDIA's libcuda.so.1. Also declares the few entry points newer drivers have that the
// installed CUDA 13.0 headers lack.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

extern "C" {

// Device-explicit multicast bind ABI, CUDA 13.1 (CUDA Driver API, "Multicast Object
// Management"): the device whose memory is bound is named instead of implied.
CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                               CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                               unsigned long long flags);
CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                CUdeviceptr memptr, size_t size, unsigned long long flags);
// Per-thread-default-stream form of the resolver (what cuGetProcAddress("cuGetProcAddress",
// ..., CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) returns).
CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *symbolStatus);
}
