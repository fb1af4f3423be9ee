// The process root (process.h): one Process per process, published through one atomic
// pointer, attached by the shim's one constructor and replaced whole by its one fork handler
// set.
#include "shim/process.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "common/control_dir.h"
#include "common/hold_marker.h"
#include "common/endpoint_client.h"
#include "common/log.h"
#include "common/settings.h"
#include "shim/endpoint/endpoint.h"
#include "shim/driver/driver_api.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/multicast_steps.h"
#include "shim/lifecycle/unicast_steps.h"
#include "shim/tables/capabilities.h"

namespace cusnap::shim {
namespace {

// The carrier and the lifecycle over this root's tables and the real driver: what a
// checkpoint and its restore run on.
struct CheckpointWork {
  HostCarrier carrier;
  DrainSteps drain;
  UnicastSteps unicast;
  MulticastSteps multicast;
  Lifecycle lifecycle;  // drives the three step sets in this order
  CheckpointWork(SharingTable& table, MulticastTable& multicast_table, ExportCache& cache,
           QuiesceGate& gate, DeviceWork& device_work)
      : carrier(driver(), CarrierOptionsFromEnvironment()),
        drain(driver(), device_work),
        unicast(driver(), table, cache, carrier, &FetchFromCreator, &AskHeldAllocations),
        multicast(driver(), table, multicast_table, cache, &FetchFromCreator),
        lifecycle({&drain, &unicast, &multicast}, gate,
                  HeldMarkerPath(ControlDir(), static_cast<int>(::getpid()))) {}
};

// Endpoint start, without locks (a fork child must never wait on a lock a vanished thread
// held): one thread wins kNeeded -> kStarting and starts it; others carry on without it.
enum EndpointState : int { kNeeded = 0, kStarting = 1, kRunning = 2, kFailedToStart = 3 };

// Everything a process tracks, and what its endpoint serves. Never destroyed: application
// and endpoint threads may still use it while exit handlers run; a fork child leaks the
// parent's (nothing freed through CUDA: the parent still owns those allocations).
struct Process final : ServedProcess {
  SharingTable table;
  MulticastTable multicast;
  MallocTable malloc;
  ExportCache cache;
  QuiesceGate gate;
  DeviceWork device_work;
  std::atomic<CheckpointWork*> checkpoint_work{nullptr};  // built at first use (Work())
  std::atomic<int> endpoint_state{kNeeded};
  std::atomic<Endpoint*> endpoint{nullptr};

  CheckpointWork& Work() {
    CheckpointWork* built = checkpoint_work.load(std::memory_order_acquire);
    if (built != nullptr) return *built;
    auto* fresh = new CheckpointWork(table, multicast, cache, gate, device_work);
    if (checkpoint_work.compare_exchange_strong(built, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread published first
    return *built;
  }

  SharingTable& sharing_table() override { return table; }
  MulticastTable& multicast_table() override { return multicast; }
  MallocTable& malloc_table() override { return malloc; }
  ExportCache& export_cache() override { return cache; }
  proto::ShimState LifecycleState() const override {
    const CheckpointWork* built = checkpoint_work.load(std::memory_order_acquire);
    return built != nullptr ? built->lifecycle.phase() : proto::ShimState::kActive;
  }
  std::string LifecycleFailure() const override {
    const CheckpointWork* built = checkpoint_work.load(std::memory_order_acquire);
    return built != nullptr ? built->lifecycle.failure() : std::string();
  }
  std::string LifecycleCheckpointId() const override {
    const CheckpointWork* built = checkpoint_work.load(std::memory_order_acquire);
    return built != nullptr ? built->lifecycle.checkpoint_id() : std::string();
  }
  std::string SettingsProblems() const override;
  uint64_t CarrierGrowthFor(size_t bytes) override { return Work().carrier.GrowthFor(bytes); }
  uint64_t CarrierHeldBytes() const override {
    const CheckpointWork* built = checkpoint_work.load(std::memory_order_acquire);
    return built != nullptr ? built->carrier.capacity() : 0;
  }
  Result<proto::StepReply> RunStep(const proto::StepRequest& request) override {
    GateBypass bypass;
    return Work().lifecycle.Handle(request);
  }
};

std::atomic<Process*> g_process{nullptr};

Process& Root() {
  Process* process = g_process.load(std::memory_order_acquire);
  if (process != nullptr) return *process;
  auto* fresh = new Process();
  if (g_process.compare_exchange_strong(process, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread published first
  return *process;
}

void ForkPrepare() {
  // The child must not inherit a table or cache half-updated by another thread. None of
  // these locks is ever held across a driver call, so this waits only for short critical
  // sections. Lock order: table before cache.
  Process& process = Root();
  process.table.mutex().lock();
  process.multicast.mutex().lock();
  process.cache.mutex().lock();
}

void ForkParent() {
  Process& process = Root();
  process.cache.mutex().unlock();
  process.multicast.mutex().unlock();
  process.table.mutex().unlock();
}

void ForkChild() {
  // Only the forking thread exists now. Drop the parent's state without freeing anything
  // through CUDA (the parent still owns those allocations) and without unlocking the old
  // mutexes: the old root is leaked with them, a fresh one takes its place.
  Process* inherited = g_process.load(std::memory_order_relaxed);
  if (inherited != nullptr) {
    inherited->cache.CloseInheritedAfterFork();
    if (Endpoint* endpoint = inherited->endpoint.load(std::memory_order_relaxed)) {
      endpoint->AbandonAfterFork();  // the parent's socket file stays: it is the parent's
    }
  }
  RenewCapabilityKeyAfterFork();  // the child's objects get secrets the parent cannot derive
  g_process.store(new Process(), std::memory_order_release);
}

// The settings the shim reads whose values the table does not take (common/settings.h),
// one line each, logged once per process (a fork child inherits them): at error level, since a
// mistyped setting must be seen at the default level. The log file is opened first, so that
// these lines land in it too; a log file the table takes that still cannot be opened is one
// of them, on stderr.
const std::string& LoggedSettingsProblems() {
  static const std::string problems = [] {
    const int log_file_error = LogToFileSetting();
    std::string text;
    for (const settings::Setting* setting : settings::kAll) {
      const char* value = settings::Value(*setting);
      if ((setting->readers & settings::kShim) == 0 || value == nullptr) continue;
      std::string line;
      if (!settings::Accepts(*setting, value)) {
        line = settings::DefaultUsed(*setting, value);
      } else if (setting == &settings::kLogFile && log_file_error != 0) {
        line = std::string(setting->name) + "='" + value + "' cannot be opened: " +
               std::strerror(log_file_error) + "; using the default, " + setting->fallback;
      } else {
        continue;
      }
      CUSNAP_LOG_ERROR("%s", line.c_str());
      text += line + "\n";
    }
    return text;
  }();
  return problems;
}

std::string Process::SettingsProblems() const { return LoggedSettingsProblems(); }

__attribute__((constructor)) void AttachProcess() {
  LoggedSettingsProblems();
  Root();
  pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  EnsureEndpoint();
}

__attribute__((destructor)) void DetachProcess() {
  if (Endpoint* endpoint = Root().endpoint.load(std::memory_order_acquire)) endpoint->Unlink();
}

}  // namespace

SharingTable& table() { return Root().table; }

MulticastTable& multicast_table() { return Root().multicast; }

MallocTable& malloc_table() { return Root().malloc; }

ExportCache& export_cache() { return Root().cache; }

QuiesceGate& gate() { return Root().gate; }

DeviceWork& device_work() { return Root().device_work; }

HostCarrier& carrier() { return Root().Work().carrier; }

void EnsureEndpoint() {
  Process& process = Root();
  if (process.endpoint_state.load(std::memory_order_acquire) != kNeeded) return;
  int expected = kNeeded;
  if (!process.endpoint_state.compare_exchange_strong(expected, kStarting,
                                                      std::memory_order_acq_rel)) {
    return;
  }
  const std::string dir = ControlDir();
  Result<Endpoint*> endpoint = Endpoint::Start(dir, process);
  if (!endpoint.ok()) {
    CUSNAP_LOG_ERROR("no endpoint for this process (checkpoint will refuse it): %s",
                     endpoint.error().message.c_str());
    process.endpoint_state.store(kFailedToStart, std::memory_order_release);
    return;
  }
  process.endpoint.store(*endpoint, std::memory_order_release);
  process.endpoint_state.store(kRunning, std::memory_order_release);
}

const char* EndpointSocketPath() {
  Endpoint* endpoint = Root().endpoint.load(std::memory_order_acquire);
  return endpoint != nullptr ? endpoint->path().c_str() : "";
}

CarryScope carry_scope() {
  static const CarryScope scope = CarryScopeFromEnvironment();
  return scope;
}

void AnticipateCarrier() {
  HostCarrier& host = carrier();
  if (host.mode() != CarrierMode::kEager) return;
  host.Anticipate(table().Counts().tracked_bytes);
}

void ReleaseDropped(const Dropped& dropped, TicketKind kind) {
  if (dropped.creator) export_cache().Invalidate(kind, dropped.id.local_id);
  if (!dropped.has_real) return;
  auto release = driver().cuMemRelease;
  const CUresult rc = release != nullptr ? release(dropped.real) : CUDA_ERROR_NOT_INITIALIZED;
  if (rc != CUDA_SUCCESS) {
    const char* what = kind == TicketKind::kMulticast ? "multicast object" : "allocation";
    CUSNAP_LOG_WARN("releasing the real handle of %s failed: %s",
                    DescribeObject(dropped.id, what).c_str(), ResultText(driver(), rc).c_str());
  }
}

CUresult RefuseTaggedRealHandle(CUmemGenericAllocationHandle real, const char* call) {
  if (auto release = driver().cuMemRelease) release(real);
  CUSNAP_LOG_ERROR("%s: the driver returned handle 0x%llx, which carries cusnap's logical "
                   "tag; released it and refused the call",
                   call, static_cast<unsigned long long>(real));
  return CUDA_ERROR_INVALID_HANDLE;
}

PinScope::~PinScope() {
  if (!pinned_) return;
  if (std::optional<Dropped> dropped = table().Unpin(pinned_->key)) ReleaseDropped(*dropped);
}

}  // namespace cusnap::shim
