// What the endpoint's control thread runs: every request other than kExport, one at a time
// (DESIGN.md, "Endpoint"). kIdentify and kInspect are answered from the sharing table here;
// lifecycle requests (kQuiesce .. kActivate) go to the process root's lifecycle (process.h).
#pragma once

#include "common/messages.h"

namespace cusnap::shim {

/// Answers one control request with its reply message. kIdentify: proto::IdentifyReply,
/// the untracked imports from SharingTable::UntrackedRecords. kInspect: the sharing table's
/// records (SharingTable::Inspect), then the multicast table's (MulticastTable::Inspect).
/// Lifecycle ops: the lifecycle's proto::StepReply (HandleLifecycleRequest, process.h).
/// kExport, unknown ops and malformed requests: an error reply (status -1 or EPROTO) with a
/// message naming the process.
proto::Message HandleControlRequest(const proto::Message& request);

}  // namespace cusnap::shim
