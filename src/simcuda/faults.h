// Fault and delay injection, for tests of what happens when the driver fails or is slow.
//
//   SIMCUDA_FAULTS="name:nth:result[,name:nth:result...]"  the nth call (1-based, counted per
//       process from its start) of entry point `name` returns CUresult `result` (a number)
//       without doing anything.
//   SIMCUDA_DELAYS="name:ms[,name:ms...]"  every call of `name` takes `ms` milliseconds longer
//       (it sleeps inside the call, so it counts as in flight for cuCheckpointProcessLock).
//
//   SIMCUDA_CALL_LOG=<dir>  every driver call of the process appends its api name and a
//       newline to <dir>/<pid>.calls (for the fault matrix, tests/faults/, which learns from
//       it which entry points each phase calls in each process; slow, tests only).
//
// `name` is the api name a program gives cuGetProcAddress (cuMemCreate, cuMemcpyHtoD, ...);
// every ABI and per-thread form of that name counts together.
#pragma once

#include "cuda_api.h"

#include <optional>

namespace simcuda::faults {

/// Counts one call of `api_name`; returns the result to fail it with if a fault fires, after
/// sleeping for any configured delay.
std::optional<CUresult> on_call(const char *api_name);

/// Makes the nth call of `api_name` from now on (1 = the next one) fail with `result`.
void inject(const char *api_name, unsigned nth, CUresult result);

}  // namespace simcuda::faults
