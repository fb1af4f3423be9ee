// Runs driver calls in a chosen context: every lifecycle and carrier step pushes the
// context recorded for the allocation and pops it after (SPEC-REFERENCE K.3 #6: an
// allocation may be created with no current context; the one in use at its first map or
// export, else its device's primary context, is recorded and used).
#pragma once

#include "shim/driver/cuda_abi.h"
#include "shim/driver/driver_api.h"

namespace cusnap::shim {

/// Pushes `context` on the calling thread's context stack for the scope's lifetime
/// (cuCtxPushCurrent / cuCtxPopCurrent). status() is the push's CUresult; nothing is popped
/// when the push failed.
class ContextScope {
 public:
  ContextScope(const DriverApi& api, CUcontext context) : api_(api) {
    status_ = api_.cuCtxPushCurrent_v2 ? api_.cuCtxPushCurrent_v2(context)
                                       : CUDA_ERROR_NOT_INITIALIZED;
  }
  ~ContextScope() {
    if (status_ != CUDA_SUCCESS) return;
    CUcontext popped = nullptr;
    api_.cuCtxPopCurrent_v2(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;
  CUresult status() const { return status_; }

 private:
  const DriverApi& api_;
  CUresult status_;
};

}  // namespace cusnap::shim
