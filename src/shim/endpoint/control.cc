// The control thread's dispatch (control.h): an op's kind (protocol.h) says where it goes.
#include "shim/endpoint/control.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "common/durations.h"
#include "common/ids.h"
#include "common/text.h"
#include "shim/endpoint/resources.h"
#include "shim/driver/driver_api.h"
#include "shim/tables/gpu_identity.h"

namespace cusnap::shim {
namespace {

proto::Message Refuse(proto::Op op, const std::string& why) {
  return proto::EncodeError(op, Error{-1, ProcessText(SelfIdentity().pid) + ": " + why});
}

proto::Message Identify(ServedProcess& served) {
  const ProcessIdentity self = SelfIdentity();
  const TableCounts counts = served.sharing_table().Counts();
  proto::IdentifyReply reply;
  reply.pid = self.pid;
  reply.start_time = self.start_time;
  reply.state = served.LifecycleState();
  reply.records = counts.records + served.multicast_table().RecordCount();
  reply.untracked_imports = counts.untracked_imports;
  reply.tracked_bytes = counts.tracked_bytes;
  reply.created_total = counts.created_total;
  reply.created_host_numa = counts.created_host_numa;
  // What the checkpoint's refusal names: each untracked import's location and VA ranges.
  reply.untracked = served.sharing_table().UntrackedRecords();
  for (const std::string& api : served.malloc_table().Unsupported()) {
    reply.unsupported += api + "\n";
  }
  reply.failure = served.LifecycleFailure();
  reply.checkpoint_id = served.LifecycleCheckpointId();
  reply.settings = served.SettingsProblems();
  return reply.Encode();
}

proto::Message Inspect(ServedProcess& served) {
  proto::InspectReply reply;
  reply.records = served.sharing_table().Inspect();
  // Multicast objects, devices, bindings and multicast mappings follow.
  std::vector<proto::Record> multicast = served.multicast_table().Inspect();
  reply.records.insert(reply.records.end(), multicast.begin(), multicast.end());
  // Who fetched descriptors of what this process created: every one of them must be a
  // participant too (the coordinator's topology validation).
  reply.importers = served.export_cache().LiveImporters(SelfIdentity());
  // What the records' ordinals name. Only a process with records has used CUDA: asking
  // never loads the driver into one that did not (a launcher). RELEASED: the process may
  // be natively locked, where every driver call blocks; the list from before serves.
  if (!reply.records.empty()) {
    reply.device_uuids =
        JoinedGpuUuids(driver(), served.LifecycleState() != proto::ShimState::kReleased);
  }
  return reply.Encode();
}

proto::Message CheckResourcesOf(ServedProcess& served, const proto::Message& request) {
  Result<proto::ResourcesRequest> need = proto::ResourcesRequest::Decode(request);
  if (!need.ok()) return proto::EncodeError(request.op, need.error());
  // Only a creator has a carrier to grow (asking builds it, resolving the driver).
  const uint64_t growth =
      need->carrier_bytes == 0 ? 0 : served.CarrierGrowthFor(static_cast<size_t>(need->carrier_bytes));
  Result<proto::ResourcesReply> have = CheckResources(*need, growth);
  if (!have.ok()) return proto::EncodeError(request.op, have.error());
  have->carrier_held = served.CarrierHeldBytes();
  return have->Encode();
}

/// The folder of descriptor `fd` by its own path when this process sees that path as the same
/// folder (the carrier remembers where it wrote: a later `recover` without a state directory
/// reads there), else through the descriptor (a folder outside this process's mount
/// namespace).
std::string FolderPath(int fd) {
  const std::string by_fd = "/proc/self/fd/" + std::to_string(fd);
  char link[PATH_MAX];
  const ssize_t n = ::readlink(by_fd.c_str(), link, sizeof link - 1);
  if (n <= 0 || link[0] != '/') return by_fd;
  link[n] = '\0';
  struct stat named {}, held {};
  if (::stat(link, &named) != 0 || ::fstat(fd, &held) != 0 || named.st_dev != held.st_dev ||
      named.st_ino != held.st_ino) {
    return by_fd;
  }
  return link;
}

/// Why the carrier path of a step (its folder joined already) cannot be taken, "" when it
/// can: a save or a write names files "<dir>/<stem>-<k>.bin", so the path must be absolute
/// and end in a stem (not a folder: "////" would write "/-0.bin", where another process's
/// carrier may be); a read names a folder, absolute. A shim's only copy of its carrier must
/// not land where a path relative to its working directory happens to point.
std::string CarrierPathProblem(const proto::StepRequest& step) {
  const std::string& path = step.carrier_path;
  if (path.empty()) return "";
  const bool writes = step.op == proto::Op::kSave || step.op == proto::Op::kWriteCarrier;
  if (!writes && step.op != proto::Op::kReadCarrier) return "";
  if (path.front() != '/') return "carrier path '" + path + "' is not absolute";
  const std::string stem = path.substr(path.rfind('/') + 1);
  if (writes && (stem.empty() || stem == "." || stem == "..")) {
    return "carrier path '" + path + "' names a folder, not the stem of its files";
  }
  return "";
}

proto::Message Step(ServedProcess& served, const proto::Message& request) {
  Result<proto::StepRequest> step = proto::StepRequest::Decode(request);
  if (!step.ok()) return proto::EncodeError(request.op, step.error());
  // Refused before anything, the lease included, changes: the lease watch waits only on a
  // duration in range.
  if (std::string bad = StepDurationsProblem(*step); !bad.empty()) {
    return Refuse(request.op, std::string(proto::OpName(request.op)) + " refused: " + bad);
  }
  // A carrier step comes with the images directory as a descriptor (the coordinator may see
  // it where this process cannot: a job in a container, CRIU's own folder): its path names a
  // file in that folder, reached through the descriptor.
  if (request.fd.valid()) {
    step->carrier_path = FolderPath(request.fd.get()) +
                         (step->carrier_path.empty() ? "" : "/" + step->carrier_path);
  }
  if (std::string bad = CarrierPathProblem(*step); !bad.empty()) {
    return Refuse(request.op, std::string(proto::OpName(request.op)) + " refused: " + bad);
  }
  Result<proto::StepReply> reply = served.RunStep(*step);
  return reply.ok() ? reply->Encode(request.op) : proto::EncodeError(request.op, reply.error());
}

}  // namespace

proto::Message HandleControlRequest(ServedProcess& served, const proto::Message& request) {
  const proto::Op op = request.op;
  const std::optional<proto::OpKind> kind = proto::KindOf(op);
  if (kind == proto::OpKind::kStep) return Step(served, request);
  if (kind == proto::OpKind::kPeer) {
    return Refuse(op, std::string(proto::OpName(op)) +
                          " is served by the peer thread, not the control thread");
  }
  switch (op) {
    case proto::Op::kIdentify:
      return Identify(served);
    case proto::Op::kInspect:
      return Inspect(served);
    case proto::Op::kCheckResources:
      return CheckResourcesOf(served, request);
    default:  // a step or a peer op (above), or a value outside the list
      break;
  }
  return Refuse(op, "unknown control operation " + std::to_string(static_cast<unsigned>(op)));
}

}  // namespace cusnap::shim
