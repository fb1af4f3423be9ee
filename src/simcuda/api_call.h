// What every driver entry point does first: pass the process gate (gate.h), count the call for
// fault and delay injection (faults.h), and check that the driver is initialized.
//
//   CUresult cuFoo(...) {
//     SIMCUDA_CALL("cuFoo");              // gate + injection; no cuInit needed
//     SIMCUDA_CALL_INITIALIZED("cuFoo");  // the same, then CUDA_ERROR_NOT_INITIALIZED before cuInit
//     ...
//   }
#pragma once

#include "cuda_api.h"
#include "faults.h"
#include "gate.h"

#include <optional>

namespace simcuda {

/// True after a successful cuInit in this process (never in a child forked after it: CUDA
/// does not support a driver initialised before fork in the child, every call there fails
/// CUDA_ERROR_NOT_INITIALIZED).
bool initialized();

/// One driver call in flight, for its whole duration.
class ApiCall {
 public:
  explicit ApiCall(const char *api_name) {
    gate::enter();
    injected_ = faults::on_call(api_name);
  }
  ~ApiCall() { gate::leave(); }
  ApiCall(const ApiCall &) = delete;
  ApiCall &operator=(const ApiCall &) = delete;
  const std::optional<CUresult> &injected() const { return injected_; }

 private:
  std::optional<CUresult> injected_;
};

}  // namespace simcuda

#define SIMCUDA_CALL(api_name)                                  \
  ::simcuda::ApiCall simcuda_call_(api_name);                   \
  if (simcuda_call_.injected()) return *simcuda_call_.injected()

#define SIMCUDA_CALL_INITIALIZED(api_name) \
  SIMCUDA_CALL(api_name);                  \
  if (!::simcuda::initialized()) return CUDA_ERROR_NOT_INITIALIZED

// An entry point and its per-thread (_ptsz) form with one body: they behave alike here (the
// special streams run their work at once either way).
#define SIMCUDA_BOTH_FORMS(ret, name, api_name, params, body) \
  ret name params {                                           \
    SIMCUDA_CALL_INITIALIZED(api_name);                       \
    body                                                      \
  }                                                           \
  ret name##_ptsz params {                                    \
    SIMCUDA_CALL_INITIALIZED(api_name);                       \
    body                                                      \
  }
