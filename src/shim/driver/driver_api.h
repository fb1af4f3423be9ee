// The real driver and runtime entry points, as tables of function pointers. Driver rows
// (entry_points.def's CUSNAP_DRIVER_ENTRY rows and the generated gated_entry_points.def: every
// other entry point cuda.h declares) are filled once through
// the real libcuda's own resolver (cuGetProcAddress_v2, as NCCL's cudawrap does); runtime rows
// (CUSNAP_RUNTIME_ENTRY) come from the libcudart the program loaded, found lazily because a
// program may load the runtime long after the driver.
#pragma once

#include <string>

#include "common/text.h"
#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// Real driver entry points. A member is nullptr when the driver lacks that ABI, e.g.
/// cuMulticastBindMem_v2 on a CUDA 13.0 driver (DRIVER-FACTS F10: the resolver answers
/// CUDA_ERROR_INVALID_VALUE for version 13010), or when no libcuda could be found at all.
struct DriverApi {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) CUresult(*symbol) params;
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) CUresult(*symbol) params;
#include "shim/driver/gated_entry_points.def"
};

/// Real runtime entry points (libcudart). A member is nullptr when the runtime lacks it (the
/// _ptsz and ByVersion forms are newer than CUDA 12.0) or no runtime is loaded yet.
struct RuntimeApi {
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) cudaError_t(*symbol) params;
#include "shim/driver/entry_points.def"
  /// CUDART_VERSION of that runtime (e.g. 13000), 0 when unknown. Below 12000 the runtime's
  /// cudaGetDriverEntryPoint has no status argument (SPEC-REFERENCE C.5 (5)).
  int version = 0;
};

/// The real driver table, resolved on first use: lock-free (no once-guard that could
/// deadlock against the loader lock when first use happens inside a library constructor,
/// SPEC-REFERENCE C.5), published once and never re-resolved. Wrappers whose member is
/// nullptr return CUDA_ERROR_NOT_INITIALIZED.
const DriverApi& driver();

/// "CUDA_ERROR_NOT_SUPPORTED (801)": `result` named by `api`'s cuGetErrorName when the
/// driver knows it (CuResultText's fallback otherwise). For every message about a driver
/// call's result.
inline std::string ResultText(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(result, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  return CuResultText(result, name);
}

/// The real runtime table of the libcudart this process loaded, resolved the first time a
/// runtime is found (until then every member is nullptr and the next call looks again).
/// One CUDA runtime per process is supported (SPEC-REFERENCE C.5 (6)).
const RuntimeApi& runtime();

}  // namespace cusnap::shim
