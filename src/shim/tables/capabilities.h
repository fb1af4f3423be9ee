// The creator's side of tickets as capabilities (DESIGN.md, "Tickets"): each object's
// capability is SipHash-2-4 (128-bit output) of (kind, local id) under a random 128-bit key
// this process draws once (getrandom) and keeps for its life, checkpoints included. The
// creator stores nothing per object and checks a kExport request without any lock; an
// importer keeps the capability its ticket carried in its record, for re-exports and for
// the descriptors it fetches again at restore.
#pragma once

#include <cstdint>

#include "common/protocol.h"
#include "common/ticket.h"

namespace cusnap::shim {

/// The capability of this process's object (`kind`, `local_id`): never all zero. Draws the
/// key at first use (getrandom; falls back to /dev/urandom, then to the clock and
/// addresses, logged as weak, when both fail).
proto::Capability CapabilityOf(TicketKind kind, uint64_t local_id);

/// True when `capability` is the one CapabilityOf gives (constant time).
bool IsCapabilityOf(const proto::Capability& capability, TicketKind kind, uint64_t local_id);

/// Fork child: draws a new key, so the child's objects do not share the parent's secrets.
/// Takes no lock (only the forking thread runs).
void RenewCapabilityKeyAfterFork();

}  // namespace cusnap::shim
