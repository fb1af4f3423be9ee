// What the lifecycle and its unicast and multicast steps share: the requests to peer
// endpoints (fetch.cc), a recorded mapping's access as the driver takes it (and, for them,
// the clock and the process name of common/).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/clock.h"
#include "common/error.h"
#include "common/protocol.h"
#include "common/text.h"
#include "common/ticket.h"
#include "common/unique_fd.h"
#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// Asks object `id`'s creator for a fresh raw POSIX descriptor of it (kExport of `kind`),
/// proving the capability its ticket carried. Returns the descriptor or an Error naming this
/// process, the object and the creator's answer.
using ExportFetcher = Result<UniqueFd> (*)(const proto::ObjectId& id, TicketKind kind,
                                           const proto::Capability& capability);

/// The ExportFetcher of a running process: kExport to the creator's endpoint in the control
/// directory (endpoint_client.h, RequestExport), waiting at most 10 s for the reply.
Result<UniqueFd> FetchFromCreator(const proto::ObjectId& id, TicketKind kind,
                                  const proto::Capability& capability);

/// Asks process `pid` which of the allocations `ids` it holds a driver handle of
/// (kHeldAllocations). Returns those it holds, or an Error naming this process and `pid`.
using HeldAsker = Result<std::vector<proto::ObjectId>> (*)(int pid,
                                                          const std::vector<proto::ObjectId>& ids);

/// The HeldAsker of a running process: kHeldAllocations to `pid`'s endpoint in the control
/// directory, waiting at most 10 s for each reply (a long list goes in several requests).
Result<std::vector<proto::ObjectId>> AskHeldAllocations(int pid,
                                                        const std::vector<proto::ObjectId>& ids);

/// The first `m.access_count` access records of a recorded mapping (unicast or multicast) as
/// cuMemSetAccess takes them. CUmemAccessDesc is not the wire's AccessRecord (SPEC-REFERENCE
/// K.3 #17): field by field. Ordinals are used as recorded: a restore keeps a process's
/// ordinals (DRIVER-FACTS F7; docs/MEASURED.md M1).
template <typename Mapping>
std::array<CUmemAccessDesc, proto::kMaxAccess> AccessDescs(const Mapping& m) {
  std::array<CUmemAccessDesc, proto::kMaxAccess> access{};
  for (uint32_t i = 0; i < m.access_count && i < proto::kMaxAccess; ++i) {
    access[i].location.type = static_cast<CUmemLocationType>(m.access[i].location_type);
    access[i].location.id = m.access[i].location_id;
    access[i].flags = static_cast<CUmemAccess_flags>(m.access[i].flags);
  }
  return access;
}

}  // namespace cusnap::shim
