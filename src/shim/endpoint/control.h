// What the endpoint's control thread runs: every request other than kExport, one at a time
// (DESIGN.md, "Endpoint"). kIdentify and kInspect are answered from the sharing table here;
// lifecycle requests (kQuiesce .. kActivate) go to the process root's lifecycle (process.h).
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

/// Answers one control request. kIdentify: arg {pid, start time, records, untracked
/// imports (live allocations), tracked bytes, PackCreateCounts}, text = failure text, and
/// the untracked imports as kUntrackedImport records (SharingTable::UntrackedRecords).
/// kInspect: the sharing table as records (SharingTable::Inspect), then the multicast
/// table's (MulticastTable::Inspect). Lifecycle ops: HandleLifecycleRequest (process.h); no
/// lifecycle request carries records. kExport
/// and unknown ops: status -1 with a message naming the process.
ControlReply HandleControlRequest(const proto::Header& request,
                                  std::span<const proto::Record> records);

}  // namespace cusnap::shim
