// Native calls watched for a stopped process (native_watch.h).
#include "coordinator/participants/native_watch.h"

#include <chrono>
#include <future>

#include "coordinator/participants/hold.h"
#include "coordinator/participants/participant.h"
#include "coordinator/proc/processes.h"
#include "common/endpoint_client.h"
#include "common/text.h"

namespace cusnap::coord {

template <typename R>
R WatchedDriver::Watched(int pid, const char* what, const std::function<R()>& call) {
  std::future<R> result = std::async(std::launch::async, call);
  int stopped_ms = 0;
  bool said = false;
  while (result.wait_for(std::chrono::milliseconds(kReplyCheckMs)) != std::future_status::ready) {
    if (said) continue;
    // A process cusnap holds is stopped on purpose (the hold's own checkpoint, or a restore
    // about to continue it): its stop does not count.
    if (StoppedState(pid) && IsHeld(control_dir_, pid)) {
      stopped_ms = 0;
      continue;
    }
    const auto state = StoppedTooLong(pid, stopped_ms);
    if (!state) continue;
    said = true;
    std::string text = "waiting for the native ";
    text += what;
    text += " of ";
    text += ProcessText(pid);
    text += ": ";
    text += StoppedProcessText(control_dir_, pid, *state);
    text += "; the driver goes on once it runs again";
    remark_(text);
  }
  return result.get();
}

Result<CUprocessState> WatchedDriver::GetState(int pid) {
  return Watched<Result<CUprocessState>>(pid, "state query", [&] { return inner_.GetState(pid); });
}

Status WatchedDriver::Lock(int pid, unsigned timeout_ms) {
  return Watched<Status>(pid, "lock", [&] { return inner_.Lock(pid, timeout_ms); });
}

Status WatchedDriver::Checkpoint(int pid) {
  return Watched<Status>(pid, "checkpoint", [&] { return inner_.Checkpoint(pid); });
}

Status WatchedDriver::Restore(int pid, std::span<const UuidPair> pairs) {
  return Watched<Status>(pid, "restore", [&] { return inner_.Restore(pid, pairs); });
}

Status WatchedDriver::Unlock(int pid) {
  return Watched<Status>(pid, "unlock", [&] { return inner_.Unlock(pid); });
}

}  // namespace cusnap::coord
