// Native calls on a stopped process. The driver works on a process through the process
// itself, so cuCheckpointProcessLock, Checkpoint, Restore and Unlock wait for as long as it is
// stopped (SIGSTOP, Ctrl-Z, a debugger), and a driver call cannot be interrupted: a command
// would wait minutes without a word for a rank a user had stopped.
// WatchedDriver makes that wait loud: while a call runs, it looks at the process every
// kReplyCheckMs and, once it stayed stopped (not held by cusnap) for kStoppedAnswerMs, says
// so once, naming the process and what to do (StoppedProcessText); the call goes on.
#pragma once

#include <functional>
#include <string>

#include "coordinator/native_driver.h"

namespace cusnap::coord {

/// Every call goes to `inner`; calls on one process (GetState, Lock, Checkpoint, Restore,
/// Unlock) run on a thread of their own while this one watches the process and calls
/// `remark` once with "waiting for <native call> of <process>: <why>" when it stays stopped.
class WatchedDriver final : public CheckpointDriver {
 public:
  /// `control_dir`: where hold markers say that cusnap stopped a process (never remarked).
  WatchedDriver(CheckpointDriver& inner, std::string control_dir,
                std::function<void(const std::string&)> remark)
      : inner_(inner), control_dir_(std::move(control_dir)), remark_(std::move(remark)) {}

  std::string Describe() const override { return inner_.Describe(); }
  bool simulated() const override { return inner_.simulated(); }
  bool HoldsStopped() const override { return inner_.HoldsStopped(); }
  Result<CUprocessState> GetState(int pid) override;
  Status Lock(int pid, unsigned timeout_ms) override;
  Status Checkpoint(int pid) override;
  Status Restore(int pid, std::span<const UuidPair> pairs) override;
  Status Unlock(int pid) override;
  Result<std::vector<std::string>> DeviceUuids() override { return inner_.DeviceUuids(); }
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override {
    return inner_.DeviceFreeBytes(uuid);
  }
  Result<std::vector<std::string>> DeviceNames() override { return inner_.DeviceNames(); }

 private:
  /// Runs `call` (named `what`, on `pid`) and watches `pid` while it runs.
  template <typename R>
  R Watched(int pid, const char* what, const std::function<R()>& call);

  CheckpointDriver& inner_;
  std::string control_dir_;
  std::function<void(const std::string&)> remark_;
};

}  // namespace cusnap::coord
