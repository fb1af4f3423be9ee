// The control thread's dispatch (control.h).
#include "shim/endpoint/control.h"

#include "common/durations.h"
#include "common/ids.h"
#include "common/text.h"
#include "shim/endpoint/resources.h"
#include "shim/process.h"
#include "shim/tables/gpu_identity.h"
#include "shim/tables/multicast_table.h"

namespace cusnap::shim {
namespace {

proto::Message Refuse(proto::Op op, const std::string& why) {
  return proto::EncodeError(op, Error{-1, ProcessText(SelfIdentity().pid) + ": " + why});
}

}  // namespace

proto::Message HandleControlRequest(const proto::Message& request) {
  const proto::Op op = request.op;
  switch (op) {
    case proto::Op::kIdentify: {
      const ProcessIdentity self = SelfIdentity();
      const TableCounts counts = table().Counts();
      proto::IdentifyReply reply;
      reply.pid = self.pid;
      reply.start_time = self.start_time;
      reply.state = LifecycleState();
      reply.records = counts.records + multicast_table().RecordCount();
      reply.untracked_imports = counts.untracked_imports;
      reply.tracked_bytes = counts.tracked_bytes;
      reply.created_total = counts.created_total;
      reply.created_host_numa = counts.created_host_numa;
      // What the checkpoint's refusal names: each untracked import's location and VA ranges.
      reply.untracked = table().UntrackedRecords();
      for (const std::string& api : malloc_table().Unsupported()) reply.unsupported += api + "\n";
      reply.failure = LifecycleFailure();
      reply.checkpoint_id = LifecycleCheckpointId();
      return reply.Encode();
    }
    case proto::Op::kInspect: {
      proto::InspectReply reply;
      reply.records = table().Inspect();
      // Multicast objects, devices, bindings and multicast mappings follow.
      std::vector<proto::Record> multicast = multicast_table().Inspect();
      reply.records.insert(reply.records.end(), multicast.begin(), multicast.end());
      // Who fetched descriptors of what this process created: every one of them must be a
      // participant too (the coordinator's topology validation).
      reply.importers = export_cache().LiveImporters(SelfIdentity());
      // What the records' ordinals name. Only a process with records has used CUDA: asking
      // never loads the driver into one that did not (a launcher). RELEASED: the process may
      // be natively locked, where every driver call blocks; the list from before serves.
      if (!reply.records.empty()) {
        reply.device_uuids =
            JoinedGpuUuids(driver(), LifecycleState() != proto::ShimState::kReleased);
      }
      return reply.Encode();
    }
    case proto::Op::kCheckResources: {
      Result<proto::ResourcesRequest> need = proto::ResourcesRequest::Decode(request);
      if (!need.ok()) return proto::EncodeError(op, need.error());
      // Only a creator has a carrier to grow (asking builds it, resolving the driver).
      const uint64_t growth =
          need->carrier_bytes == 0
              ? 0
              : carrier().GrowthFor(static_cast<size_t>(need->carrier_bytes));
      Result<proto::ResourcesReply> have = CheckResources(*need, growth);
      return have.ok() ? have->Encode() : proto::EncodeError(op, have.error());
    }
    case proto::Op::kExport:
      return Refuse(op, "kExport is served by the peer thread, not the control thread");
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
    case proto::Op::kRenew:
    case proto::Op::kCommit:
    case proto::Op::kWriteCarrier:
    case proto::Op::kReadCarrier: {
      Result<proto::StepRequest> step = proto::StepRequest::Decode(request);
      if (!step.ok()) return proto::EncodeError(op, step.error());
      // Refused before anything, the lease included, changes: the watcher waits only on a
      // duration in range.
      if (std::string bad = StepDurationsProblem(*step); !bad.empty()) {
        return Refuse(op, std::string(proto::OpName(op)) + " refused: " + bad);
      }
      Result<proto::StepReply> reply = HandleLifecycleRequest(*step);
      return reply.ok() ? reply->Encode(op) : proto::EncodeError(op, reply.error());
    }
  }
  return Refuse(op, "unknown control operation " + std::to_string(static_cast<unsigned>(op)));
}

}  // namespace cusnap::shim
