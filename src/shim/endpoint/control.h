// What the endpoint's control thread runs: every request other than kExport, one at a time
// (DESIGN.md, "Endpoint"). Queries (kIdentify, kInspect, kCheckResources) are answered from
// the served process's tables here; steps (every op of kind kStep, protocol.h) go to its
// lifecycle (ServedProcess::RunStep).
#pragma once

#include "common/messages.h"
#include "shim/endpoint/served.h"

namespace cusnap::shim {

/// Answers one control request with its reply message. kIdentify: proto::IdentifyReply,
/// the untracked imports from SharingTable::UntrackedRecords. kInspect: the sharing table's
/// records (SharingTable::Inspect), then the multicast table's (MulticastTable::Inspect).
/// Steps: the lifecycle's proto::StepReply (ServedProcess::RunStep). kExport, unknown ops and
/// malformed requests: an error reply (status -1 or EPROTO) with a message naming the
/// process.
proto::Message HandleControlRequest(ServedProcess& served, const proto::Message& request);

}  // namespace cusnap::shim
