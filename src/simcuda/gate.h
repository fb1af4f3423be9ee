// The process gate: how the checkpoint API of another process stops this one. Every driver
// entry point passes through it (api_call.h); cuCheckpointProcessLock closes it once every
// call in flight has returned, and calls made while it is closed wait until
// cuCheckpointProcessUnlock opens it again (CUDA Driver API, "Checkpointing": a LOCKED process's
// further CUDA API calls block).
#pragma once

#include "cuda_api.h"

namespace simcuda::gate {

/// Marks the calling thread as inside a driver call; waits while the process is locked.
/// Nested calls (the runtime calling the driver) only count once.
void enter();
/// Ends the call started by enter().
void leave();

/// Closes the gate: new calls wait, then waits up to timeout_ms (0 = no limit) for the calls
/// in flight to return. CUDA_ERROR_TIMEOUT (gate reopened) if they did not in time.
CUresult lock(unsigned timeout_ms);
/// Reopens the gate and wakes every waiting call.
void unlock();

/// Driver calls in flight right now (for tests).
int in_flight();

}  // namespace simcuda::gate
