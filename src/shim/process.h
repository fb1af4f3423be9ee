// Process-wide state of the shim: the sharing table, the export cache and the endpoint, and
// what happens to them across fork (DESIGN.md, "Endpoint"; SPEC-REFERENCE I.1).
//
// Endpoint start, decided here: the initial process starts its endpoint in the shim's
// constructor, so a process launched under `cusnap run` is reachable before the coordinator
// could ever look for it, even if it never makes a tracked call. A child of fork gets a
// clean slate (no table, no endpoint, its own logical handle counter) and starts its own
// endpoint lazily at its first tracked call (EnsureEndpoint). The child drops everything
// inherited without freeing it through CUDA: the parent still owns those allocations.
#pragma once

#include <cstdint>
#include <optional>

#include "shim/tables/export_cache.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

/// This process's sharing table (replaced by an empty one in a fork child).
SharingTable& table();

/// This process's export cache (replaced by an empty one in a fork child).
ExportCache& export_cache();

/// Makes sure this process's endpoint runs: one atomic load when it does. Called by every
/// tracked hook; the first call in a fork child starts the child's endpoint. A failure to
/// start is logged once per process (tracked calls still work; the coordinator will find no
/// endpoint and refuse to checkpoint this process).
void EnsureEndpoint();

/// The path of this process's endpoint socket ("" when none runs).
const char* EndpointSocketPath();

/// Finishes with an allocation that lost its last reference: drops its export cache entry
/// (creator) and releases its real handle through the driver. Never called under the table
/// lock.
void ReleaseDropped(const Dropped& dropped);

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
