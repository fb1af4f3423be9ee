// Contexts: one primary context per device (retained and released by count), contexts made
// with cuCtxCreate, and each thread's stack of current contexts.
#pragma once

#include "cuda_api.h"

// The object behind a CUcontext. Primary contexts live for the whole process (their handle
// stays the same across release and retain, as in CUDA); created ones until cuCtxDestroy.
struct CUctx_st {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
};

namespace simcuda::contexts {

/// True when `ctx` is a live context: an active primary context or a created one not yet
/// destroyed.
bool live(CUcontext ctx);
/// The device of the calling thread's current context: CUDA_ERROR_INVALID_CONTEXT when the
/// thread has none or it is no longer live.
CUresult current_device(int *device);

}  // namespace simcuda::contexts
