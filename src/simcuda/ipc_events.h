// The shared part of an interprocess event (cuEventCreate with CU_EVENT_INTERPROCESS): two
// counters in a small memfd, records queued and records reached, which every process that
// holds the event (its creator, and whoever opened its CUipcEventHandle) updates and reads, so
// a wait in one process sees a record reached in another. An opener reopens the creator's
// memfd through /proc/<pid>/fd. Nothing here is touched by a native checkpoint: opened IPC
// events work on after a native cycle (DRIVER-FACTS F15).
#pragma once

#include "cuda_api.h"

#include <atomic>
#include <cstdint>

namespace simcuda::ipc_events {

/// The counters every holder of one interprocess event shares.
struct Shared {
  std::atomic<uint64_t> recorded;
  std::atomic<uint64_t> reached;
};

/// One process's hold on the counters: where they are mapped and the memfd behind them.
struct Hold {
  Shared *shared = nullptr;
  int fd = -1;
};

/// Fresh counters for a new interprocess event; CUDA_ERROR_OUT_OF_MEMORY when the host has no
/// memory for them.
CUresult create(Hold *hold);
/// The creator's handle of the event held by `hold`.
void describe(const Hold &hold, CUipcEventHandle *handle);
/// Opens the counters a handle names: CUDA_ERROR_INVALID_VALUE when it is no simcuda handle,
/// CUDA_ERROR_INVALID_CONTEXT when it is this process's own, CUDA_ERROR_INVALID_HANDLE when
/// its creator or event is gone.
CUresult open(const CUipcEventHandle &handle, Hold *hold);
/// Unmaps and closes.
void drop(Hold &hold);
/// Waits until every record queued before the call has been reached, in any process.
void wait_reached(const Shared &shared);

}  // namespace simcuda::ipc_events
