// Participants over the endpoint protocol (participant.h).
#include "coordinator/participant.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "coordinator/proc.h"
#include "coordinator/records.h"

namespace cusnap::coord {
namespace {

class EndpointParticipant final : public Participant {
 public:
  EndpointParticipant(std::string path, int pid) : path_(std::move(path)), pid_(pid) {}
  int pid() const override { return pid_; }
  std::optional<uint64_t> start_time() const override { return ProcessStartTime(pid_); }
  Result<Reply> Call(const proto::Header& request, int timeout_ms) override {
    return Request(path_, request, {}, timeout_ms);
  }
  std::string endpoint() const override { return path_; }

 private:
  std::string path_;
  int pid_;
};

std::string ReplyText(const proto::Header& h) {
  return std::string(h.text, strnlen(h.text, sizeof h.text));
}

/// "pid P: <op> failed: <why>"; a shim's text already starts with "pid P: ", said once.
Error Named(const Participant& p, proto::Op op, const Error& e) {
  const std::string prefix = "pid " + std::to_string(p.pid()) + ": ";
  std::string why = e.message.empty() ? "code " + std::to_string(e.code) : e.message;
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  return Error{e.code, prefix + OpName(op) + " failed: " + why};
}

/// The reply must answer the request that was sent (SPEC-REFERENCE H.2).
Status CheckEcho(const Participant& p, proto::Op op, const proto::Header& h) {
  if (h.op != static_cast<uint16_t>(op)) {
    return Error{-1, "pid " + std::to_string(p.pid()) + ": " + OpName(op) +
                         " was answered with op " + std::to_string(h.op)};
  }
  return Ok{};
}

}  // namespace

std::unique_ptr<Participant> ConnectEndpoint(const std::string& control_dir, int pid) {
  return std::make_unique<EndpointParticipant>(EndpointPath(control_dir, pid), pid);
}

proto::Header MakeRequest(proto::Op op, std::initializer_list<uint64_t> args) {
  proto::Header h{};
  h.magic = proto::kMagic;
  h.version = proto::kVersion;
  h.op = static_cast<uint16_t>(op);
  size_t i = 0;
  for (uint64_t a : args) {
    if (i < std::size(h.arg)) h.arg[i++] = a;
  }
  return h;
}

Result<Identity> Identify(Participant& participant) {
  auto reply = participant.Call(MakeRequest(proto::Op::kIdentify), kQueryTimeoutMs);
  if (!reply && reply.error().code == ECONNREFUSED) {
    const int pid = participant.pid();
    const std::string path = participant.endpoint();
    return Error{ECONNREFUSED,
                 "pid " + std::to_string(pid) + " (" + ProcessName(pid) + "): its cusnap " +
                     "endpoint " + (path.empty() ? std::string("socket") : path) +
                     " does not answer (connection refused): the process was started without " +
                     "the shim or its shim stopped; start it with 'cusnap run'"};
  }
  if (!reply) return Named(participant, proto::Op::kIdentify, reply.error());
  const auto& h = reply->header;
  if (auto echo = CheckEcho(participant, proto::Op::kIdentify, h); !echo) return echo.error();
  Identity id;
  id.pid = static_cast<int>(h.arg[0]);
  id.start_time = h.arg[1];
  id.phase = h.phase;
  id.records = h.arg[2];
  id.untracked_imports = h.arg[3];
  id.tracked_bytes = h.arg[4];
  id.created_total = proto::CreatedTotal(h.arg[5]);
  id.created_host_numa = proto::CreatedHostNuma(h.arg[5]);
  id.failure = ReplyText(h);
  for (const proto::Record& r : reply->records) {
    if (r.kind == static_cast<uint32_t>(proto::RecordKind::kUntrackedImport)) {
      id.untracked.push_back(r);
    }
  }
  if (id.pid != participant.pid()) {
    return Error{-1, "pid " + std::to_string(participant.pid()) +
                         ": its endpoint answers for pid " + std::to_string(id.pid) +
                         " (a stale socket?)"};
  }
  return id;
}

Result<std::vector<proto::Record>> Inspect(Participant& participant) {
  auto reply = participant.Call(MakeRequest(proto::Op::kInspect), kQueryTimeoutMs);
  if (!reply) return Named(participant, proto::Op::kInspect, reply.error());
  if (auto echo = CheckEcho(participant, proto::Op::kInspect, reply->header); !echo) {
    return echo.error();
  }
  return std::move(reply->records);
}

Result<StepReply> Step(Participant& participant, proto::Op op,
                       std::initializer_list<uint64_t> args) {
  auto reply = participant.Call(MakeRequest(op, args), kLifecycleTimeoutMs);
  if (!reply) return Named(participant, op, reply.error());
  if (auto echo = CheckEcho(participant, op, reply->header); !echo) return echo.error();
  if (reply->fd >= 0) {
    ::close(reply->fd);
    return Error{-1, "pid " + std::to_string(participant.pid()) + ": " + OpName(op) +
                         " reply carried a descriptor"};
  }
  StepReply step;
  step.phase = reply->header.phase;
  step.step_ns = reply->header.arg[1];
  if (op == proto::Op::kSave || op == proto::Op::kReallocate) {
    step.bytes = reply->header.arg[0];
    step.copy_ns = reply->header.arg[2];
  }
  return step;
}

}  // namespace cusnap::coord
