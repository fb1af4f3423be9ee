// The real driver and runtime entry points, as one table of function pointers filled once
// through the real libcuda's own resolver (cuGetProcAddress_v2, as NCCL's cudawrap does);
// runtime entries come from the libcudart the program loaded. Rows come from
// entry_points.def (intercepted) and driver_calls.def (called by the shim only).
#pragma once

#include "shim/cuda_abi.h"

namespace cusnap::shim {

/// Real entry points. A member is nullptr when the driver (or runtime) lacks it, e.g.
/// cuMulticastBindMem_v2 on a CUDA 13.0 driver (DRIVER-FACTS F10).
struct DriverApi {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) CUresult(*symbol) params;
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) cudaError_t(*symbol) params;
#include "shim/entry_points.def"
#define CUSNAP_DRIVER_CALL(symbol, api_name, since, params) CUresult(*symbol) params;
#include "shim/driver_calls.def"
};

/// The real driver table, resolved on first use (thread-safe, never re-resolved). Calling
/// a null member is a bug: wrappers check and return CUDA_ERROR_NOT_INITIALIZED.
const DriverApi& driver();

}  // namespace cusnap::shim
