// Drain before save (DESIGN.md, "Transactions": in-flight calls drain and the devices are
// synchronised before SAVE). Once the quiesce gate holds every new driver call, the work the
// application already queued (async copies, memsets, launches on its streams) may still be
// running on the devices; SAVE must not read memory that work is about to write. DeviceWork
// knows which contexts the process uses and which stream captures are open, and Drain
// synchronises the contexts within a deadline, on a helper thread: a kernel that waits for a
// peer held at its own gate (a collective) never finishes, and the control thread must be
// able to answer, reopen the gate and let the peer go on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "common/error.h"
#include "shim/driver/driver_api.h"
#include "shim/lifecycle/lifecycle.h"

namespace cusnap::shim {

/// What the application keeps running on its devices, as the shim's hooks see it. Thread-safe.
class DeviceWork {
 public:
  /// cuStreamBeginCapture* succeeded on `stream` in the calling thread.
  void CaptureBegan(CUstream stream);
  /// A cuStreamEndCapture call on `stream` returned; `still_capturing` is what the driver
  /// says now (an end that failed may leave the capture open).
  void CaptureEnded(CUstream stream, bool still_capturing);
  /// cuCtxCreate* made `context` / cuCtxDestroy* destroyed it.
  void ContextCreated(CUcontext context);
  void ContextDestroyed(CUcontext context);

  /// Synchronises every context the process uses (the active primary contexts and those it
  /// created) within `deadline_ms`, the gate being closed. CUDA_ERROR_NOT_READY, naming the
  /// process, the stream and the thread, while a stream capture is open (nothing is waited
  /// for then); CUDA_ERROR_NOT_READY, naming the process, the device and how long, when work
  /// was still running at the deadline (the synchronisation goes on in the background; the
  /// caller reopens the gate so that a peer's work can finish); a synchronisation's own
  /// error, named, when it failed.
  Status Drain(const DriverApi& api, int64_t deadline_ms);

 private:
  mutable std::mutex mutex_;
  std::map<CUstream, pid_t> captures_;  // open captures: stream -> thread that began it
  std::set<CUcontext> created_;
};

/// The drain as a step set of the lifecycle (LifecycleSteps): kQuiesce drains `work` over
/// `api`; every other step is nothing. Both references stay in use for its lifetime.
class DrainSteps final : public LifecycleSteps {
 public:
  DrainSteps(const DriverApi& api, DeviceWork& work) : api_(api), work_(work) {}
  Status DrainDeviceWork(int64_t deadline_ms) override { return work_.Drain(api_, deadline_ms); }

 private:
  const DriverApi& api_;
  DeviceWork& work_;
};

}  // namespace cusnap::shim
