#include "shim/endpoint/control.h"

#include <cstring>

#include "common/ids.h"
#include "common/socket.h"
#include "shim/process.h"

namespace cusnap::shim {
namespace {

ControlReply Refuse(const proto::Header& request, proto::Phase phase, const std::string& why) {
  ControlReply reply;
  reply.header = request;
  reply.header.status = -1;
  reply.header.count = 0;
  reply.header.flags = 0;
  reply.header.phase = static_cast<uint32_t>(phase);
  std::memset(reply.header.arg, 0, sizeof reply.header.arg);
  SetHeaderText(reply.header, "pid " + std::to_string(SelfIdentity().pid) + ": " + why);
  return reply;
}

}  // namespace

ControlReply HandleControlRequest(const proto::Header& request,
                                  std::span<const proto::Record> records) {
  (void)records;  // no control request carries records
  const proto::Phase phase = LifecyclePhase();
  const auto op = static_cast<proto::Op>(request.op);
  switch (op) {
    case proto::Op::kIdentify: {
      const ProcessIdentity self = SelfIdentity();
      const TableCounts counts = table().Counts();
      ControlReply reply;
      reply.header = MakeHeader(op);
      reply.header.phase = static_cast<uint32_t>(phase);
      reply.header.arg[0] = static_cast<uint64_t>(self.pid);
      reply.header.arg[1] = self.start_time;
      reply.header.arg[2] = counts.records + multicast_table().RecordCount();
      reply.header.arg[3] = counts.untracked_imports;
      reply.header.arg[4] = counts.tracked_bytes;
      reply.header.arg[5] = proto::PackCreateCounts(counts.created_total, counts.created_host_numa);
      // What the checkpoint's refusal names: each untracked import's location and VA ranges.
      reply.records = table().UntrackedRecords();
      SetHeaderText(reply.header, LifecycleFailure());
      return reply;
    }
    case proto::Op::kInspect: {
      ControlReply reply;
      reply.header = MakeHeader(op);
      reply.header.phase = static_cast<uint32_t>(phase);
      reply.records = table().Inspect();
      // Multicast objects, devices, bindings and multicast mappings follow (issue 5).
      std::vector<proto::Record> multicast = multicast_table().Inspect();
      reply.records.insert(reply.records.end(), multicast.begin(), multicast.end());
      return reply;
    }
    case proto::Op::kExport:
      return Refuse(request, phase, "kExport is served by the peer thread, not the control thread");
    case proto::Op::kQuiesce:
    case proto::Op::kDetachMulticast:
    case proto::Op::kSave:
    case proto::Op::kRelease:
    case proto::Op::kReallocate:
    case proto::Op::kImport:
    case proto::Op::kMulticastCreate:
    case proto::Op::kMulticastImport:
    case proto::Op::kMulticastJoin:
    case proto::Op::kMulticastBind:
    case proto::Op::kResume:
    case proto::Op::kActivate:
      return ControlReply{HandleLifecycleRequest(request), {}};
  }
  return Refuse(request, phase, "unknown control operation " + std::to_string(request.op));
}

}  // namespace cusnap::shim
