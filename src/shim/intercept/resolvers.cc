// The resolver hooks: cuGetProcAddress (legacy, _v2, _v2_ptsz) and the runtime's
// cudaGetDriverEntryPoint[ByVersion][_ptsz]. Each calls the real resolver first and
// substitutes a wrapper only after it succeeded (CUDA_SUCCESS / cudaSuccess, a non-NULL
// pointer, status NULL or SUCCESS); every failure and every "not found" / "version not
// sufficient" status reaches the program unchanged (DRIVER-FACTS F10). Which wrapper is
// decided by replacement_for (replacement.h) from the pointer the driver returned.
#include "common/log.h"
#include "shim/driver/driver_api.h"
#include "shim/hooks/hooks.h"
#include "shim/driver/replacement.h"

namespace cusnap::shim::hook {
namespace {

constexpr cuuint64_t kLegacyStream = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThreadStream = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

// The per-thread-default-stream choice a request makes: an explicit flag wins; otherwise the
// resolver's own form decides (the _ptsz resolvers default to per-thread).
bool wants_per_thread(unsigned long long flags, unsigned long long legacy_flag,
                      unsigned long long per_thread_flag, bool ptsz_form) {
  if ((flags & per_thread_flag) != 0) return true;
  if ((flags & legacy_flag) != 0) return false;
  return ptsz_form;
}

// How a resolver family spells success and "not found": the driver's CUresult and
// CUdriverProcAddressQueryResult, or the runtime's cudaError_t and
// cudaDriverEntryPointQueryResult.
template <typename Code, typename Status>
struct Spelling {
  Code success;
  Code not_found;  // the answer without a status pointer
  Status found;
  Status symbol_not_found;
};
constexpr Spelling<CUresult, CUdriverProcAddressQueryResult> kDriverSpelling{
    CUDA_SUCCESS, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SUCCESS,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND};
constexpr Spelling<cudaError_t, cudaDriverEntryPointQueryResult> kRuntimeSpelling{
    cudaSuccess, cudaErrorSymbolNotFound, cudaDriverEntryPointSuccess,
    cudaDriverEntryPointSymbolNotFound};

// Substitutes in a real resolver's answer `rc` / `*pointer` / `*status` (status may be
// NULL) and returns the code the program gets. Anything but a clean success is unchanged.
template <typename Code, typename Status>
Code substitute(const Spelling<Code, Status>& spelling, Code rc, const char* symbol,
                void** pointer, bool per_thread, Status* status) {
  if (rc != spelling.success || symbol == nullptr || pointer == nullptr || *pointer == nullptr) {
    return rc;
  }
  if (status != nullptr && *status != spelling.found) return rc;
  Replacement pick = replacement_for(symbol, *pointer, per_thread);
  switch (pick.kind) {
    case Replacement::Kind::kKeep:
      return rc;
    case Replacement::Kind::kWrapper:
      *pointer = const_cast<void*>(pick.wrapper);
      return rc;
    case Replacement::Kind::kUnknownAbi:
      break;
  }
  // Fail closed, the way the resolver answers a name it lacks (DRIVER-FACTS F10).
  CUSNAP_LOG_WARN("resolver: the driver's %s is an ABI the interception table lacks; answered "
                  "\"not found\" so that calls cannot bypass the shim",
                  symbol);
  *pointer = nullptr;
  if (status == nullptr) return spelling.not_found;
  *status = spelling.symbol_not_found;
  return spelling.success;
}

// A runtime older than CUDA 12.0 has the 3-argument cudaGetDriverEntryPoint (SPEC-REFERENCE
// C.5 (5)): its status pointer is not an argument and must be neither read nor passed on
// as one. The call still passes 4 arguments; a 3-argument callee ignores the 4th register
// (System V x86-64 calling convention).
cudaDriverEntryPointQueryResult* usable_status(cudaDriverEntryPointQueryResult* status) {
  int version = runtime().version;
  return (version != 0 && version < 12000) ? nullptr : status;
}

}  // namespace

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  const DriverApi& real = driver();
  CUresult rc;
  if (real.cuGetProcAddress != nullptr) {
    rc = real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  } else if (real.cuGetProcAddress_v2 != nullptr) {  // same lookup, status not asked for
    rc = real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  } else {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return substitute(kDriverSpelling, rc, symbol, pfn,
                    wants_per_thread(flags, kLegacyStream, kPerThreadStream, false),
                    static_cast<CUdriverProcAddressQueryResult*>(nullptr));
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  auto real = driver().cuGetProcAddress_v2;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  return substitute(kDriverSpelling, rc, symbol, pfn,
                    wants_per_thread(flags, kLegacyStream, kPerThreadStream, false), symbolStatus);
}

// The per-thread form: the real _ptsz resolver where the driver has one, else _v2; either
// way the per-thread default is made explicit in the flags, so both answer alike.
CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  const DriverApi& real = driver();
  auto resolver = real.cuGetProcAddress_v2_ptsz != nullptr ? real.cuGetProcAddress_v2_ptsz
                                                           : real.cuGetProcAddress_v2;
  if (resolver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  bool per_thread = wants_per_thread(flags, kLegacyStream, kPerThreadStream, true);
  CUresult rc = resolver(symbol, pfn, cudaVersion, per_thread ? (flags | kPerThreadStream) : flags,
                         symbolStatus);
  return substitute(kDriverSpelling, rc, symbol, pfn, per_thread, symbolStatus);
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  auto real = runtime().cudaGetDriverEntryPoint;
  if (real == nullptr) return cudaErrorInitializationError;
  cudaDriverEntryPointQueryResult* status = usable_status(driverStatus);
  cudaError_t rc = real(symbol, funcPtr, flags, status);
  return substitute(
      kRuntimeSpelling, rc, symbol, funcPtr,
      wants_per_thread(flags, cudaEnableLegacyStream, cudaEnablePerThreadDefaultStream, false),
      status);
}

// The runtime's per-thread forms, like cuGetProcAddress_v2_ptsz: the real _ptsz function
// where the runtime has one, else the default one, with the per-thread default explicit.
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                         unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus) {
  const RuntimeApi& real = runtime();
  auto resolver = real.cudaGetDriverEntryPoint_ptsz != nullptr ? real.cudaGetDriverEntryPoint_ptsz
                                                               : real.cudaGetDriverEntryPoint;
  if (resolver == nullptr) return cudaErrorInitializationError;
  bool per_thread =
      wants_per_thread(flags, cudaEnableLegacyStream, cudaEnablePerThreadDefaultStream, true);
  cudaDriverEntryPointQueryResult* status = usable_status(driverStatus);
  cudaError_t rc = resolver(symbol, funcPtr,
                            per_thread ? (flags | cudaEnablePerThreadDefaultStream) : flags, status);
  return substitute(kRuntimeSpelling, rc, symbol, funcPtr, per_thread, status);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  auto real = runtime().cudaGetDriverEntryPointByVersion;
  if (real == nullptr) return cudaErrorInitializationError;
  cudaError_t rc = real(symbol, funcPtr, cudaVersion, flags, driverStatus);
  return substitute(
      kRuntimeSpelling, rc, symbol, funcPtr,
      wants_per_thread(flags, cudaEnableLegacyStream, cudaEnablePerThreadDefaultStream, false),
      driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  const RuntimeApi& real = runtime();
  auto resolver = real.cudaGetDriverEntryPointByVersion_ptsz != nullptr
                      ? real.cudaGetDriverEntryPointByVersion_ptsz
                      : real.cudaGetDriverEntryPointByVersion;
  if (resolver == nullptr) return cudaErrorInitializationError;
  bool per_thread =
      wants_per_thread(flags, cudaEnableLegacyStream, cudaEnablePerThreadDefaultStream, true);
  cudaError_t rc =
      resolver(symbol, funcPtr, cudaVersion,
               per_thread ? (flags | cudaEnablePerThreadDefaultStream) : flags, driverStatus);
  return substitute(kRuntimeSpelling, rc, symbol, funcPtr, per_thread, driverStatus);
}

}  // namespace cusnap::shim::hook
