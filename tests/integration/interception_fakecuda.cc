// A stand-in libcuda.so.1 whose resolver hands out, for cuMemCreate asked at 13000 or later,
// a function that is none of the ABIs the interception table knows (a future cuMemCreate_v2,
// say). The shim must fail closed on it (SPEC-REFERENCE C.5 (2)): answer "not found" rather
// than hand out a pointer that would bypass it. Used only by interception_failclosed.
#include "shim/driver/cuda_abi.h"

#include <cstring>

extern "C" {

__attribute__((visibility("default"))) CUresult cuMemCreate(CUmemGenericAllocationHandle*, size_t,
                                                            const CUmemAllocationProp*, unsigned long long) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

// The unknown newer ABI: not exported, only reachable through the resolver.
static CUresult future_cuMemCreate(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                   unsigned long long, int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

__attribute__((visibility("default"))) CUresult cuMemGetAccess(unsigned long long*, const CUmemLocation*,
                                                               CUdeviceptr) {
  return CUDA_ERROR_NOT_SUPPORTED;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                                    cuuint64_t,
                                                                    CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (std::strcmp(symbol, "cuMemCreate") == 0) {
    *pfn = cudaVersion >= 13000 ? reinterpret_cast<void*>(&future_cuMemCreate) : reinterpret_cast<void*>(&cuMemCreate);
  } else if (std::strcmp(symbol, "cuMemGetAccess") == 0) {
    *pfn = reinterpret_cast<void*>(&cuMemGetAccess);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0 && cudaVersion >= 12000) {
    *pfn = reinterpret_cast<void*>(&cuGetProcAddress_v2);
  }
  if (status != nullptr) *status = *pfn != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}

}  // extern "C"
