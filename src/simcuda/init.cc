// cuInit and cuDriverGetVersion, and what initialization starts: the checkpoint service and
// the fork handler (a child forked after cuInit has no usable driver, as with CUDA: every call
// there returns CUDA_ERROR_NOT_INITIALIZED).
#include "api_call.h"
#include "checkpoint_service.h"
#include "config.h"
#include "devices.h"
#include "ledger.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace simcuda {
namespace {

std::atomic<bool> g_initialized{false};
std::atomic<bool> g_forked_child{false};

void after_fork_in_child() {
  g_forked_child.store(true);
  checkpoint::forget_after_fork();
  ledger::forget_after_fork();
}

void initialize() {
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
  checkpoint::start();
  g_initialized.store(true, std::memory_order_release);
}

}  // namespace

bool initialized() { return g_initialized.load(std::memory_order_acquire) && !g_forked_child.load(); }

}  // namespace simcuda

extern "C" {

CUresult cuInit(unsigned int Flags) {
  SIMCUDA_CALL("cuInit");
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (simcuda::g_forked_child.load()) return CUDA_ERROR_NOT_INITIALIZED;
  const simcuda::Config &c = simcuda::config();
  if (!c.error.empty()) {
    std::fprintf(stderr, "simcuda[%d]: cuInit: %s\n", static_cast<int>(getpid()), c.error.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  // No GPUs, or none that CUDA_VISIBLE_DEVICES names, or one named twice (DRIVER-FACTS F13).
  if (const CUresult visible = simcuda::devices::visible_status(); visible != CUDA_SUCCESS) return visible;
  static std::once_flag once;
  std::call_once(once, simcuda::initialize);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) {
  SIMCUDA_CALL("cuDriverGetVersion");
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = simcuda::config().driver_version;
  return CUDA_SUCCESS;
}

}  // extern "C"
