#include "shim/process.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "common/endpoint_client.h"
#include "common/log.h"
#include "shim/intercept/driver_api.h"
#include "shim/endpoint/endpoint.h"

namespace cusnap::shim {
namespace {

// Everything a process tracks, replaced whole in a fork child. Never destroyed: application
// and endpoint threads may still use it while exit handlers run.
struct ProcessState {
  SharingTable table;
  ExportCache cache;
};

std::atomic<ProcessState*> g_state{nullptr};

ProcessState& State() {
  ProcessState* state = g_state.load(std::memory_order_acquire);
  if (state != nullptr) return *state;
  auto* fresh = new ProcessState();
  if (g_state.compare_exchange_strong(state, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread published first
  return *state;
}

// Endpoint start, without locks (a fork child must never wait on a lock a vanished thread
// held): one thread wins kNeeded -> kStarting and starts it; others carry on without it.
enum EndpointState : int { kNeeded = 0, kStarting = 1, kRunning = 2, kFailedToStart = 3 };
std::atomic<int> g_endpoint_state{kNeeded};
std::atomic<Endpoint*> g_endpoint{nullptr};

void ForkPrepare() {
  // The child must not inherit a table or cache half-updated by another thread. Neither
  // lock is ever held across a driver call, so this waits only for short critical sections.
  ProcessState& state = State();
  state.table.mutex().lock();
  state.cache.mutex().lock();
}

void ForkParent() {
  ProcessState& state = State();
  state.cache.mutex().unlock();
  state.table.mutex().unlock();
}

void ForkChild() {
  // Only the forking thread exists now. Drop the parent's state without freeing anything
  // through CUDA (the parent still owns those allocations) and without unlocking the old
  // mutexes: the old objects are leaked with them, a fresh state takes their place.
  ProcessState* inherited = g_state.load(std::memory_order_relaxed);
  if (inherited != nullptr) inherited->cache.CloseInheritedAfterFork();
  g_state.store(new ProcessState(), std::memory_order_release);
  if (Endpoint* endpoint = g_endpoint.load(std::memory_order_relaxed)) {
    endpoint->AbandonAfterFork();  // the parent's socket file stays: it is the parent's
  }
  g_endpoint.store(nullptr, std::memory_order_relaxed);
  g_endpoint_state.store(kNeeded, std::memory_order_release);
}

__attribute__((constructor)) void StartProcess() {
  pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  EnsureEndpoint();
}

__attribute__((destructor)) void EndProcess() {
  if (Endpoint* endpoint = g_endpoint.load(std::memory_order_acquire)) endpoint->Unlink();
}

}  // namespace

SharingTable& table() { return State().table; }

ExportCache& export_cache() { return State().cache; }

void EnsureEndpoint() {
  if (g_endpoint_state.load(std::memory_order_acquire) != kNeeded) return;
  int expected = kNeeded;
  if (!g_endpoint_state.compare_exchange_strong(expected, kStarting, std::memory_order_acq_rel)) {
    return;
  }
  const std::string dir = ControlDir();
  Result<Endpoint*> endpoint = Endpoint::Start(dir);
  if (!endpoint.ok()) {
    CUSNAP_LOG_ERROR("no endpoint for this process (checkpoint will refuse it): %s",
                     endpoint.error().message.c_str());
    g_endpoint_state.store(kFailedToStart, std::memory_order_release);
    return;
  }
  g_endpoint.store(*endpoint, std::memory_order_release);
  g_endpoint_state.store(kRunning, std::memory_order_release);
}

const char* EndpointSocketPath() {
  Endpoint* endpoint = g_endpoint.load(std::memory_order_acquire);
  return endpoint != nullptr ? endpoint->path().c_str() : "";
}

void ReleaseDropped(const Dropped& dropped) {
  if (dropped.creator) export_cache().Invalidate(TicketKind::kUnicast, dropped.id.local_id);
  if (!dropped.has_real) return;
  auto release = driver().cuMemRelease;
  const CUresult rc = release != nullptr ? release(dropped.real) : CUDA_ERROR_NOT_INITIALIZED;
  if (rc != CUDA_SUCCESS) {
    CUSNAP_LOG_WARN("releasing the real handle of %s failed: CUresult %d",
                    DescribeObject(dropped.id).c_str(), static_cast<int>(rc));
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
