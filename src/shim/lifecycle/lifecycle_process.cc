// The process's lifecycle: one Lifecycle over this process's sharing table, export cache,
// host carrier and the real driver, installed at the control thread's dispatch point
// (control.h) when the shim is loaded. A fork child gets its own on first use (the table and
// cache it works on are the child's fresh ones; process.h).
#include <unistd.h>

#include <atomic>
#include <string>

#include "common/log.h"
#include "shim/carrier/carrier.h"
#include "shim/endpoint/control.h"
#include "shim/intercept/driver_api.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/lifecycle_process.h"
#include "shim/lifecycle/multicast_steps.h"
#include "shim/tables/multicast_table.h"
#include "shim/process.h"
#include "shim/lifecycle/quiesce.h"
#include "shim/lifecycle/unicast_steps.h"

namespace cusnap::shim {
namespace {

struct ProcessLifecycle {
  UnicastSteps steps;
  MulticastSteps multicast;         // issue 5: multicast teams (multicast_steps.h)
  StepsWithMulticast all;           // both, as the one LifecycleSteps the lifecycle drives
  Lifecycle lifecycle;
  ProcessLifecycle()
      : steps(driver(), table(), export_cache(), carrier(), &FetchExportFromCreator),
        multicast(driver(), table(), multicast_table(), export_cache(), &FetchMulticastFromCreator),
        all(steps, multicast),
        lifecycle(all, gate()) {}
};

// Never destroyed (the control thread may run while the process exits); rebuilt in a fork
// child, whose table and cache are new objects. Only the control thread creates it after
// load, so the pid check needs no lock beyond the atomic publication.
std::atomic<ProcessLifecycle*> g_current{nullptr};
std::atomic<int> g_owner_pid{0};

ProcessLifecycle& Current() {
  ProcessLifecycle* current = g_current.load(std::memory_order_acquire);
  const int pid = getpid();
  if (current == nullptr || g_owner_pid.load(std::memory_order_acquire) != pid) {
    current = new ProcessLifecycle();
    g_owner_pid.store(pid, std::memory_order_release);
    g_current.store(current, std::memory_order_release);
  }
  return *current;
}

Result<proto::StepReply> Handle(const proto::StepRequest& request) {
  // Lifecycle work may pass through the shim's own hooks while the gate is closed.
  GateBypass bypass;
  return Current().lifecycle.Handle(request);
}

proto::ShimState Phase() {
  ProcessLifecycle* current = g_current.load(std::memory_order_acquire);
  if (current == nullptr || g_owner_pid.load(std::memory_order_acquire) != getpid()) {
    return proto::ShimState::kActive;
  }
  return current->lifecycle.phase();
}

std::string Failure() {
  ProcessLifecycle* current = g_current.load(std::memory_order_acquire);
  if (current == nullptr || g_owner_pid.load(std::memory_order_acquire) != getpid()) return "";
  return current->lifecycle.failure();
}

__attribute__((constructor)) void InstallAtLoad() {
  InstallLifecycleHandler(LifecycleHandler{&Handle, &Phase, &Failure});
}

}  // namespace

void AnticipateCarrier() {
  HostCarrier& host = carrier();
  if (host.mode() != CarrierMode::kEager) return;
  host.Anticipate(table().Counts().tracked_bytes);
}

}  // namespace cusnap::shim
