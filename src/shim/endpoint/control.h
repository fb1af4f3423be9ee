// What the endpoint's control thread runs: every request other than kExport, one at a time
// (DESIGN.md, "Endpoint"). kIdentify and kInspect are answered from the sharing table here;
// lifecycle requests (kQuiesce .. kActivate) go to the handler the lifecycle installs.
#pragma once

#include <string>

#include "common/error.h"
#include "common/messages.h"

namespace cusnap::shim {

// ---- The lifecycle dispatch point -----------------------------------------------------
// The lifecycle installs its handler once (e.g. from its own constructor-time setup). Until
// then every lifecycle op is answered status -1, "not implemented", and state ACTIVE.

/// The lifecycle's entry points into the control thread. Every member may be null.
struct LifecycleHandler {
  /// Runs one lifecycle request (kQuiesce .. kActivate) on the control thread and returns
  /// its reply, or the error naming the process and the resource.
  Result<proto::StepReply> (*handle)(const proto::StepRequest& request);
  /// The shim's state now (kIdentify, kInspect).
  proto::ShimState (*phase)();
  /// Why the shim is FAILED ("" otherwise): kIdentify's text.
  std::string (*failure)();
};

/// Installs `handler` (copied; later calls replace it). Thread-safe.
void InstallLifecycleHandler(const LifecycleHandler& handler);
// ----------------------------------------------------------------------------------------

/// Answers one control request with its reply message. kIdentify: proto::IdentifyReply,
/// the untracked imports from SharingTable::UntrackedRecords. kInspect: the sharing table's
/// records (SharingTable::Inspect), then the multicast table's (MulticastTable::Inspect).
/// Lifecycle ops: the installed LifecycleHandler's proto::StepReply. kExport, unknown ops and
/// malformed requests: an error reply (status -1 or EPROTO) with a message naming the process.
proto::Message HandleControlRequest(const proto::Message& request);

}  // namespace cusnap::shim
