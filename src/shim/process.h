// The process root: everything the shim keeps for this process (the sharing table, the
// multicast table, the export cache, the quiesce gate, the host carrier, the lifecycle and
// the endpoint) in one object, attached once and replaced whole in a fork child (DESIGN.md,
// "Endpoint"; SPEC-REFERENCE I.1). mimalloc's process attach is the model: one constructor,
// one set of fork handlers, nothing else in the shim keeps process state of its own.
//
// Endpoint start, decided here: the initial process starts its endpoint in the shim's
// constructor, so a process launched under `cusnap run` is reachable before the coordinator
// could ever look for it, even if it never makes a tracked call. A child of fork gets a
// clean slate (a new root: no table, no endpoint, its own logical handle counter, an open
// gate) and starts its own endpoint lazily at its first driver call, whatever entry point that
// is (EnsureEndpoint, in every hook's CUSNAP_QUIESCE_GATE). The
// child drops everything inherited without freeing it through CUDA: the parent still owns
// those allocations. The carrier and the lifecycle hold the real driver table, whose
// resolution loads libcuda: they are built at their first use, never in a process that does
// not use CUDA.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/messages.h"
#include "shim/carrier/carrier.h"
#include "shim/lifecycle/drain.h"
#include "shim/lifecycle/quiesce.h"
#include "shim/tables/export_cache.h"
#include "shim/tables/malloc_table.h"
#include "shim/tables/multicast_table.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

/// This process's sharing table.
SharingTable& table();

/// This process's multicast table.
MulticastTable& multicast_table();

/// This process's legacy-memory table (cuMemAlloc served by the shim, legacy IPC).
MallocTable& malloc_table();

/// This process's export cache.
ExportCache& export_cache();

/// This process's quiesce gate. Application threads may sit in it at exit: never destroyed.
QuiesceGate& gate();

/// What this process keeps running on its devices: open stream captures and created
/// contexts, drained at kQuiesce (lifecycle/drain.h).
DeviceWork& device_work();

/// This process's host carrier over the real driver (built at first use; resolves the
/// driver table).
HostCarrier& carrier();

/// Makes sure this process's endpoint runs: one atomic load when it does. Called by every
/// hook (CUSNAP_QUIESCE_GATE); the first call in a fork child starts the child's endpoint. A failure to
/// start is logged once per process (tracked calls still work; the coordinator will find no
/// endpoint and refuse to checkpoint this process).
void EnsureEndpoint();

/// The path of this process's endpoint socket ("" when none runs).
const char* EndpointSocketPath();

/// Which cuMemCreate allocations the shim tracks and carries (CUSNAP_CARRY, read once):
/// every one (kAll, the default) or only POSIX-capable ones (kShared).
CarryScope carry_scope();

/// After a tracked allocation was created: in CUSNAP_CARRIER=eager mode the host carrier
/// grows in the background toward the bytes the sharing table now tracks, so a checkpoint
/// finds its host memory already provided (DRIVER-FACTS "Speeds"). Lazy mode: nothing.
void AnticipateCarrier();

/// Finishes with an object that lost its last reference (an allocation, or with
/// TicketKind::kMulticast a multicast object): drops its export cache entry (creator) and
/// releases its real handle through the driver. Never called under a table lock.
void ReleaseDropped(const Dropped& dropped, TicketKind kind = TicketKind::kUnicast);

/// A real handle from the driver that carries the logical tag would be ambiguous: releases
/// it, logs which `call` returned it, and returns CUDA_ERROR_INVALID_HANDLE.
CUresult RefuseTaggedRealHandle(CUmemGenericAllocationHandle real, const char* call);

/// Pins the allocation behind a logical handle for one hook (RAII): its real handle stays
/// valid until the scope ends, and an allocation whose last reference went while pinned is
/// released then.
class PinScope {
 public:
  explicit PinScope(uint64_t logical) : pinned_(table().Pin(logical)) {}
  ~PinScope();
  PinScope(const PinScope&) = delete;
  PinScope& operator=(const PinScope&) = delete;
  /// False when the logical handle is unknown (CUDA_ERROR_INVALID_HANDLE).
  explicit operator bool() const { return pinned_.has_value(); }
  const Pinned& operator*() const { return *pinned_; }
  const Pinned* operator->() const { return &*pinned_; }

 private:
  std::optional<Pinned> pinned_;
};

}  // namespace cusnap::shim

/// First statement of every hook (tracked or only gated): makes sure this process has its
/// endpoint (one atomic load once it has: a process forked before CUDA use gets one at its
/// first driver call, whatever entry point that is), then waits while the shim is
/// quiesced and returns the gate's error from the hook when the wait bound passes.
#define CUSNAP_QUIESCE_GATE()                                        \
  ::cusnap::shim::EnsureEndpoint();                                  \
  ::cusnap::shim::GateScope cusnap_gate_scope_(::cusnap::shim::gate()); \
  if (cusnap_gate_scope_.status() != CUDA_SUCCESS) return cusnap_gate_scope_.status()
