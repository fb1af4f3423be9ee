// cuGetProcAddress (legacy 4-argument ABI), cuGetProcAddress_v2 and its per-thread form:
// the driver's own entry-point resolver, answered from entry_points.def (CUDA Driver API,
// "Driver Entry Point Access"; DRIVER-FACTS F10):
//   - unknown name: CUDA_SUCCESS, *pfn NULL, status CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
//   - version older than every ABI of the name: CUDA_SUCCESS, *pfn NULL, status
//     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
//   - version newer than the driver (SIMCUDA_DRIVER_VERSION): CUDA_ERROR_INVALID_VALUE
//   - CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: the _ptds/_ptsz form where one exists
// The legacy ABI has no status: it reports the two "not found" cases as CUDA_ERROR_NOT_FOUND
// (CUDA 11.x documentation of cuGetProcAddress).
#include "api_call.h"
#include "config.h"

#include <cstring>

namespace simcuda {
namespace {

struct EntryPoint {
  const char *api_name;
  int since;
  void *function;
  void *per_thread_function;  // nullptr when the name has no per-thread form
};

const EntryPoint kEntryPoints[] = {
#define SIMCUDA_API(api_name, since, symbol) {api_name, since, reinterpret_cast<void *>(&symbol), nullptr},
#define SIMCUDA_API_PTSZ(api_name, since, symbol, per_thread_symbol) \
  {api_name, since, reinterpret_cast<void *>(&symbol), reinterpret_cast<void *>(&per_thread_symbol)},
#include "entry_points.def"
};

constexpr cuuint64_t kKnownFlags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

CUresult resolve(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult *status) {
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (cuda_version > config().driver_version) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_INVALID_VALUE;
  }
  const EntryPoint *best = nullptr;
  bool known = false;
  for (const EntryPoint &e : kEntryPoints) {
    if (std::strcmp(e.api_name, symbol) != 0) continue;
    known = true;
    if (e.since <= cuda_version) best = &e;  // rows ascend by version: the last fit is the newest
  }
  if (best == nullptr) {
    if (status != nullptr)
      *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
  }
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = per_thread && best->per_thread_function != nullptr ? best->per_thread_function : best->function;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda

extern "C" {

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
  SIMCUDA_CALL("cuGetProcAddress");
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult r = simcuda::resolve(symbol, pfn, cudaVersion, flags, &status);
  if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) return CUDA_ERROR_NOT_FOUND;
  return r;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
  SIMCUDA_CALL("cuGetProcAddress");
  return simcuda::resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress_v2_ptsz(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *symbolStatus) {
  SIMCUDA_CALL("cuGetProcAddress");
  // The per-thread form's default is the per-thread default stream.
  if (flags == CU_GET_PROC_ADDRESS_DEFAULT) flags = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  return simcuda::resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

}  // extern "C"
