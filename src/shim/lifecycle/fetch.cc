// Restore-time requests to peer endpoints (lifecycle_common.h): imports fetch their
// descriptors (FetchFromCreator); a creator asks its importers what they still hold
// (AskHeldAllocations).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

// How long an importer waits for a creator's kExport reply, and a creator for an importer's
// kHeldAllocations reply (ms).
constexpr int kPeerTimeoutMs = 10'000;

// Allocation ids per kHeldAllocations request: well inside the endpoint's request bound
// (64 KiB, endpoint.h) at 24 bytes each.
constexpr size_t kIdsPerRequest = 1024;

}  // namespace

Result<UniqueFd> FetchFromCreator(const proto::ObjectId& id, TicketKind kind,
                                  const proto::Capability& capability) {
  Result<proto::ExportReply> reply =
      RequestExport(id, static_cast<uint32_t>(kind), capability, kPeerTimeoutMs);
  if (!reply) {
    const char* what = kind == TicketKind::kMulticast ? "multicast object" : "allocation";
    return Error{reply.error().code, ThisProcess() + ": fetching a descriptor of " +
                                         DescribeObject(id, what) + " from its creator: " +
                                         reply.error().message};
  }
  return std::move(reply->fd);
}

Result<std::vector<proto::ObjectId>> AskHeldAllocations(int pid,
                                                        const std::vector<proto::ObjectId>& ids) {
  std::vector<proto::ObjectId> held;
  for (size_t at = 0; at < ids.size(); at += kIdsPerRequest) {
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(at);
    const size_t end = std::min(ids.size(), at + kIdsPerRequest);
    const auto last = ids.begin() + static_cast<std::ptrdiff_t>(end);
    const proto::HeldAllocationsRequest request{std::vector<proto::ObjectId>(first, last)};
    Result<proto::HeldAllocationsReply> reply = Request<proto::HeldAllocationsReply>(
        EndpointPath(ControlDir(), pid), request.Encode(), kPeerTimeoutMs);
    if (!reply) {
      return Error{reply.error().code, ThisProcess() + ": asking its importer " + ProcessText(pid) +
                                           " which of its allocations it still holds: " +
                                           reply.error().message};
    }
    held.insert(held.end(), reply->held.begin(), reply->held.end());
  }
  return held;
}

}  // namespace cusnap::shim
