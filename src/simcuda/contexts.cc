// Primary contexts, created contexts and the per-thread current-context stack (CUDA Driver
// API, "Primary Context Management" and "Context Management").
#include "contexts.h"

#include "api_call.h"
#include "config.h"
#include "devices.h"
#include "streams.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <set>
#include <vector>

namespace simcuda::contexts {
namespace {

struct PrimaryContext {
  CUctx_st context;
  unsigned retains = 0;
};

struct Registry {
  std::mutex mutex;
  std::array<PrimaryContext, kMaxDevices> primaries;
  std::set<CUcontext> created;
};

Registry &registry() {
  static Registry *r = [] {
    auto *reg = new Registry;  // never destroyed: handles outlive static destruction
    for (int d = 0; d < kMaxDevices; ++d) {
      reg->primaries[static_cast<size_t>(d)].context.device = d;
      reg->primaries[static_cast<size_t>(d)].context.primary = true;
    }
    return reg;
  }();
  return *r;
}

// Each thread's context stack; the top is the current context.
thread_local std::vector<CUcontext> stack;

bool live_locked(Registry &r, CUcontext ctx) {
  if (ctx == nullptr) return false;
  for (auto &p : r.primaries)
    if (&p.context == ctx) return p.retains > 0;
  return r.created.count(ctx) != 0;
}

}  // namespace

bool live(CUcontext ctx) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return live_locked(r, ctx);
}

CUresult current_device(int *device) {
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  CUcontext ctx = stack.back();
  if (!live_locked(r, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

namespace {

CUresult create(CUcontext *pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto *ctx = new CUctx_st{dev, flags, false};
  {
    Registry &r = registry();
    std::lock_guard lock(r.mutex);
    r.created.insert(ctx);
  }
  stack.push_back(ctx);  // cuCtxCreate makes the new context current
  *pctx = ctx;
  return CUDA_SUCCESS;
}

PrimaryContext &primary(CUdevice dev) { return registry().primaries[static_cast<size_t>(dev)]; }

}  // namespace
}  // namespace simcuda::contexts

using namespace simcuda::contexts;  // NOLINT: entry points below are the module's exports
using simcuda::devices::valid;

extern "C" {

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDevicePrimaryCtxRetain");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(registry().mutex);
  PrimaryContext &p = primary(dev);
  ++p.retains;
  *pctx = &p.context;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDevicePrimaryCtxRelease");
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(registry().mutex);
  PrimaryContext &p = primary(dev);
  if (p.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;  // releasing more than was retained
  --p.retains;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDevicePrimaryCtxReset");
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(registry().mutex);
  primary(dev).retains = 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  SIMCUDA_CALL_INITIALIZED("cuDevicePrimaryCtxSetFlags");
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(registry().mutex);
  primary(dev).context.flags = flags;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  SIMCUDA_CALL_INITIALIZED("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(registry().mutex);
  *flags = primary(dev).context.flags;
  *active = primary(dev).retains > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// The CUDA 2.0 ABI: the same parameters (a 32-bit CUdevice either way).
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuCtxCreate");
  return create(pctx, flags, dev);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuCtxCreate");
  return create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int count, unsigned int flags, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuCtxCreate");
  (void)params;  // execution affinity has no meaning without a GPU
  (void)count;
  return create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuCtxCreate");
  (void)params;  // execution affinity and CIG parameters have no meaning without a GPU
  return create(pctx, flags, dev);
}

// cuCtxDestroy of either ABI: a created context only.
static CUresult destroy_created(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry &r = registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.created.erase(ctx) == 0) return CUDA_ERROR_INVALID_CONTEXT;  // unknown, or a primary context
  }
  // Other threads may still hold it in their stacks; they see INVALID_CONTEXT from then on.
  std::erase(stack, ctx);
  delete ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy(CUcontext ctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxDestroy");
  return destroy_created(ctx);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxDestroy");
  return destroy_created(ctx);
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxGetCurrent");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = stack.empty() ? nullptr : stack.back();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxSetCurrent");
  if (ctx == nullptr) {  // same as popping (a no-op on an empty stack)
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) stack.push_back(ctx);
  else stack.back() = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxPushCurrent");
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!live(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  SIMCUDA_CALL_INITIALIZED("cuCtxPopCurrent");
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  SIMCUDA_CALL_INITIALIZED("cuCtxGetDevice");
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return current_device(device);
}

CUresult cuCtxGetFlags(unsigned int *flags) {
  SIMCUDA_CALL_INITIALIZED("cuCtxGetFlags");
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = current_device(&device); r != CUDA_SUCCESS) return r;
  *flags = stack.back()->flags;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
  SIMCUDA_CALL_INITIALIZED("cuCtxSynchronize");
  int device = 0;
  if (CUresult r = current_device(&device); r != CUDA_SUCCESS) return r;
  return simcuda::streams::synchronize_device(device);
}

}  // extern "C"
