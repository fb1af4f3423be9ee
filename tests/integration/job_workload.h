// The in-flight workload of job_worker (job_worker.cc, commands "workload" and
// "workload-stop"): a thread that keeps writing its part of a shared view and verifying it,
// and reading the other parts, through async memsets, copies and launches on streams of its
// own, while `cusnap checkpoint` / `cusnap restore` cycles run (the whole application is
// held, no write that returned success is lost, no call fails).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

namespace jobworker {

/// Starts the workload on [va, va + size): this process owns part `part` of `parts` equal
/// parts and writes only there; `context` is made current on the workload's thread. "ok" or
/// "bad <why>".
std::string StartWorkload(CUcontext context, CUdeviceptr va, size_t size, int part, int parts);

/// "ok <iterations> <errors> <lost words> <first error or -> <first lost word or ->" so far,
/// the workload running on.
std::string WorkloadCounts();

/// Stops the workload and answers WorkloadCounts() as it finished.
std::string StopWorkload();

}  // namespace jobworker
