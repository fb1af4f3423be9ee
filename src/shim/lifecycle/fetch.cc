// Restore-time imports fetch their descriptors here (lifecycle_common.h, FetchFromCreator).
#include <string>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

// How long an importer waits for a creator's kExport reply (ms).
constexpr int kExportTimeoutMs = 10'000;

}  // namespace

Result<UniqueFd> FetchFromCreator(const proto::ObjectId& id, TicketKind kind,
                                  const proto::Capability& capability) {
  Result<proto::ExportReply> reply =
      RequestExport(id, static_cast<uint32_t>(kind), capability, kExportTimeoutMs);
  if (!reply) {
    const char* what = kind == TicketKind::kMulticast ? "multicast object" : "allocation";
    return Error{reply.error().code, ThisProcess() + ": fetching a descriptor of " +
                                         DescribeObject(id, what) + " from its creator: " +
                                         reply.error().message};
  }
  return std::move(reply->fd);
}

}  // namespace cusnap::shim
