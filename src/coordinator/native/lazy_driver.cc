// LazyDriver (lazy_driver.h).
#include "coordinator/native/lazy_driver.h"

#include <mutex>

namespace cusnap::coord {

struct LazyDriver::State {
  DriverLoader load;
  std::once_flag once;
  std::unique_ptr<CheckpointDriver> driver;
  Error failed{0, ""};
};

LazyDriver::LazyDriver(DriverLoader load) : state_(std::make_unique<State>()) {
  state_->load = std::move(load);
}

LazyDriver::~LazyDriver() = default;

Result<CheckpointDriver*> LazyDriver::Load() const {
  State& s = *state_;
  std::call_once(s.once, [&s] {
    auto loaded = s.load();
    if (loaded) {
      s.driver = std::move(*loaded);
    } else {
      s.failed = loaded.error();
    }
  });
  if (s.driver == nullptr) return s.failed;
  return s.driver.get();
}

bool LazyDriver::loaded() const { return state_->driver != nullptr; }

std::string LazyDriver::Describe() const {
  auto driver = Load();
  return driver ? (*driver)->Describe() : "not loaded: " + driver.error().message;
}

bool LazyDriver::simulated() const {
  auto driver = Load();
  return driver && (*driver)->simulated();
}

bool LazyDriver::HoldsStopped() const {
  auto driver = Load();
  return driver && (*driver)->HoldsStopped();
}

Result<CUprocessState> LazyDriver::GetState(int pid) {
  return Forward<Result<CUprocessState>>([&](CheckpointDriver& d) { return d.GetState(pid); });
}

Status LazyDriver::Lock(int pid, unsigned timeout_ms) {
  return Forward<Status>([&](CheckpointDriver& d) { return d.Lock(pid, timeout_ms); });
}

Status LazyDriver::Checkpoint(int pid) {
  return Forward<Status>([&](CheckpointDriver& d) { return d.Checkpoint(pid); });
}

Status LazyDriver::Restore(int pid, std::span<const UuidPair> pairs) {
  return Forward<Status>([&](CheckpointDriver& d) { return d.Restore(pid, pairs); });
}

Status LazyDriver::Unlock(int pid) {
  return Forward<Status>([&](CheckpointDriver& d) { return d.Unlock(pid); });
}

Result<std::vector<std::string>> LazyDriver::DeviceUuids() {
  return Forward<Result<std::vector<std::string>>>([](CheckpointDriver& d) { return d.DeviceUuids(); });
}

Result<uint64_t> LazyDriver::DeviceFreeBytes(const std::string& uuid) {
  return Forward<Result<uint64_t>>([&](CheckpointDriver& d) { return d.DeviceFreeBytes(uuid); });
}

Result<std::vector<std::string>> LazyDriver::DeviceNames() {
  return Forward<Result<std::vector<std::string>>>([](CheckpointDriver& d) { return d.DeviceNames(); });
}

}  // namespace cusnap::coord
