// Participants over the endpoint protocol (participant.h).
#include "coordinator/participants/participant.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <cerrno>

#include "common/text.h"
#include "coordinator/participants/hold.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/record/records.h"

namespace cusnap::coord {
namespace {

class EndpointParticipant final : public Participant {
 public:
  EndpointParticipant(std::string path, int pid) : path_(std::move(path)), pid_(pid) {}
  int pid() const override { return pid_; }
  std::optional<uint64_t> start_time() const override { return ProcessStartTime(pid_); }
  Result<proto::Message> Call(const proto::Message& request, int timeout_ms) override {
    int stopped_ms = 0;
    return Request(path_, request, timeout_ms, [&] { return StillAnswering(stopped_ms); });
  }
  std::string endpoint() const override { return path_; }

 private:
  /// While a reply is awaited (Request's still_waiting): "" while the process can answer; a
  /// text once it stayed stopped (SIGSTOP, Ctrl-Z, a debugger) for kStoppedAnswerMs. A
  /// stopped process answers nothing until continued: a command would wait for it up to
  /// kLifecycleTimeoutMs, silently, without this text. The request stays queued: the
  /// process runs it once continued, and what the command does meanwhile (roll back, or
  /// stop for `recover`) holds either way (lifecycle.h: each step can be run again, and the
  /// lease rolls back a shim whose command went).
  std::string StillAnswering(int& stopped_ms) const {
    const auto state = StoppedTooLong(pid_, stopped_ms);
    if (!state) return "";
    const size_t slash = path_.rfind('/');
    const std::string control_dir = slash == std::string::npos ? "." : path_.substr(0, slash);
    if (IsHeld(control_dir, pid_)) {
      return "the process is held stopped by cusnap (checkpointed): it answers once 'cusnap "
             "restore' continues it";
    }
    return StoppedProcessText(control_dir, pid_, *state) + "; it then runs what it was " +
           "asked, and 'cusnap status' says where the job stands";
  }

  std::string path_;
  int pid_;
};

/// "pid P: <op> failed: <why>"; the shim's text is sent whole and names its process itself.
Error Named(const Participant& p, proto::Op op, const Error& e) {
  // A process that is gone now ended during the command, whatever its endpoint answered
  // last (a reset connection, an early end of the stream): that is what the user must read.
  if (!p.start_time()) return ExitedDuringCommand(p.pid(), Lowercase(proto::OpName(op)));
  return InContext(ProcessText(p.pid()), Lowercase(proto::OpName(op)) + " failed", e);
}

/// Sends `request` to `participant` and decodes the reply as `Reply` (Decode's `args` after
/// the message); every error named as Named says.
template <typename Reply, typename... Args>
Result<Reply> Ask(Participant& participant, proto::Op op, const proto::Message& request,
                  int timeout_ms, Args... args) {
  Result<proto::Message> message = participant.Call(request, timeout_ms);
  if (!message) return Named(participant, op, message.error());
  Result<Reply> reply = Reply::Decode(*message, args...);
  if (!reply) return Named(participant, op, reply.error());
  if (message->fd.valid()) {
    return Error{EPROTO, ProcessText(participant.pid()) + ": " +
                             Lowercase(proto::OpName(op)) + " reply carried a descriptor"};
  }
  return reply;
}

}  // namespace

Error ExitedDuringCommand(int pid, const std::string& step) {
  return Error{ESRCH, ProcessText(pid) + " exited during the command (" + step +
                          " not done): its own memory went with it"};
}

std::optional<char> StoppedTooLong(int pid, int& stopped_ms) {
  const auto state = StoppedState(pid);
  stopped_ms = state ? stopped_ms + kReplyCheckMs : 0;
  if (stopped_ms < kStoppedAnswerMs) return std::nullopt;
  return state;
}

std::unique_ptr<Participant> ConnectEndpoint(const std::string& control_dir, int pid) {
  return std::make_unique<EndpointParticipant>(EndpointPath(control_dir, pid), pid);
}

Result<Identity> Identify(Participant& participant) {
  Result<Identity> id = Ask<Identity>(participant, proto::Op::kIdentify,
                                      proto::IdentifyRequest{}.Encode(), kQueryTimeoutMs);
  if (!id && id.error().code == ECONNREFUSED) {
    const int pid = participant.pid();
    const std::string path = participant.endpoint();
    // Why nobody listens decides the advice: an exited process needs no restart.
    std::string why;
    if (ProcessExited(pid)) {
      why = "the process " + ExitedText(pid) + "; the socket is stale (remove it with 'cusnap "
            "status --prune')";
    } else if (!MappedShimPath(pid).empty()) {
      why = "the process has the shim loaded but its endpoint stopped (the shim's log is on "
            "the job's stderr)";
    } else {
      why = "the process runs without the cusnap shim; start the job with 'cusnap run'";
    }
    return Error{ECONNREFUSED, ProcessText(pid, ProcessName(pid)) +
                                   ": its cusnap endpoint " +
                                   (path.empty() ? std::string("socket") : path) +
                                   " does not answer (connection refused): " + why};
  }
  if (!id) return id.error();
  if (id->pid != participant.pid()) {
    return Error{-1, ProcessText(participant.pid()) +
                         ": its endpoint answers for pid " + std::to_string(id->pid) +
                         " (a stale socket?)"};
  }
  return id;
}

Result<proto::InspectReply> InspectWithImporters(Participant& participant) {
  return Ask<proto::InspectReply>(participant, proto::Op::kInspect,
                                  proto::InspectRequest{}.Encode(), kQueryTimeoutMs);
}

Result<std::vector<proto::Record>> Inspect(Participant& participant) {
  auto reply = InspectWithImporters(participant);
  if (!reply) return reply.error();
  return std::move(reply->records);
}

Result<proto::ResourcesReply> CheckResources(Participant& participant,
                                             const proto::ResourcesRequest& need) {
  Result<proto::Message> message = participant.Call(need.Encode(), kQueryTimeoutMs);
  if (!message) return Named(participant, proto::Op::kCheckResources, message.error());
  Result<proto::ResourcesReply> reply = proto::ResourcesReply::Decode(*message);
  // A shortfall is a refusal, not a failure: the shim's text names its process already.
  if (!reply && reply.error().code != -1) {
    return Named(participant, proto::Op::kCheckResources, reply.error());
  }
  return reply;
}

Result<proto::StepReply> Step(Participant& participant, proto::Op op) {
  return Step(participant, proto::StepRequest{op, 0, ""});
}

Result<proto::StepReply> Step(Participant& participant, const proto::StepRequest& request,
                              int pass_fd) {
  proto::Message message = request.Encode();
  if (pass_fd >= 0) {
    message.fd.reset(::fcntl(pass_fd, F_DUPFD_CLOEXEC, 0));
    if (!message.fd.valid()) {
      return Named(participant, request.op, Error{errno, std::string("cannot pass the carrier "
                                                                     "folder: ") + std::strerror(errno)});
    }
  }
  return Ask<proto::StepReply>(participant, request.op, message, kLifecycleTimeoutMs, request.op);
}

}  // namespace cusnap::coord
