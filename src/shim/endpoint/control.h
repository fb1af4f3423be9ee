// What the endpoint's control thread runs: every request other than kExport, one at a time
// (DESIGN.md, "Endpoint"). kIdentify and kInspect are answered from the sharing table here;
// lifecycle requests (kQuiesce .. kActivate) go to the handler the lifecycle installs.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/protocol.h"

namespace cusnap::shim {

/// A reply: the header (op echoed, status, phase, text) and the records that follow it
/// (the endpoint splits them over packets).
struct ControlReply {
  proto::Header header{};
  std::vector<proto::Record> records;
};

// ---- The lifecycle dispatch point -----------------------------------------------------
// The lifecycle installs its handler once (e.g. from its own constructor-time setup). Until
// then every lifecycle op is answered status -1, "not implemented", and phase ACTIVE.

/// The lifecycle's entry points into the control thread. Every member may be null.
struct LifecycleHandler {
  /// Runs one lifecycle request (kQuiesce .. kActivate) on the control thread and returns
  /// the reply header (op echoed, status, phase, text, args).
  proto::Header (*handle)(const proto::Header& request, std::span<const proto::Record> records);
  /// The shim's phase now (kIdentify, and the phase of every reply).
  proto::Phase (*phase)();
  /// Why the shim is FAILED ("" otherwise): kIdentify's text.
  std::string (*failure)();
};

/// Installs `handler` (copied; later calls replace it). Thread-safe.
void InstallLifecycleHandler(const LifecycleHandler& handler);
// ----------------------------------------------------------------------------------------

/// Answers one control request. kIdentify: arg {pid, start time, records, untracked
/// imports (live allocations), tracked bytes, PackCreateCounts}, text = failure text, and
/// the untracked imports as kUntrackedImport records (SharingTable::UntrackedRecords).
/// kInspect: the sharing table as records (SharingTable::Inspect), then the multicast
/// table's (MulticastTable::Inspect). Lifecycle ops: the installed LifecycleHandler. kExport
/// and unknown ops: status -1 with a message naming the process.
ControlReply HandleControlRequest(const proto::Header& request,
                                  std::span<const proto::Record> records);

}  // namespace cusnap::shim
