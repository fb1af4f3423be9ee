// A driver loaded when a sequence first needs it: a command that has nothing to act on
// (`checkpoint --all` with no endpoint) refuses without paying for cuInit, which on a GPU
// machine is most of such an answer's time (a refusal that needs no driver answers within 1.5x a
// usage error's time: bench/cli_answer_time.sh).
#pragma once

#include <functional>
#include <memory>

#include "coordinator/native/native_driver.h"

namespace cusnap::coord {

/// Loads the driver (LoadDriver and its wrappers); called at most once.
using DriverLoader = std::function<Result<std::unique_ptr<CheckpointDriver>>()>;

/// A CheckpointDriver that runs `load` at its first use (any member, Describe() included,
/// or Load()) and forwards to what it loaded. When `load` fails, every call answers its
/// error (Describe(): "not loaded: <why>", simulated() and HoldsStopped(): false) and
/// `load` is not run again. Thread-safe as the drivers it loads are.
class LazyDriver final : public CheckpointDriver {
 public:
  explicit LazyDriver(DriverLoader load);
  ~LazyDriver() override;

  /// Loads now (if not yet): the loaded driver, or the load's error. Const: what the driver
  /// is belongs to its first use, whichever member that is (Describe() too).
  Result<CheckpointDriver*> Load() const;
  /// True once a load succeeded.
  bool loaded() const;

  std::string Describe() const override;
  bool simulated() const override;
  Result<CUprocessState> GetState(int pid) override;
  Status Lock(int pid, unsigned timeout_ms) override;
  Status Checkpoint(int pid) override;
  Status Restore(int pid, std::span<const UuidPair> pairs) override;
  Status Unlock(int pid) override;
  Result<std::vector<std::string>> DeviceUuids() override;
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override;
  Result<std::vector<std::string>> DeviceNames() override;
  bool HoldsStopped() const override;

 private:
  /// `call` on the loaded driver, or the load's error as an R.
  template <typename R, typename Call>
  R Forward(Call call) {
    auto driver = Load();
    if (!driver) return driver.error();
    return call(**driver);
  }

  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cusnap::coord
