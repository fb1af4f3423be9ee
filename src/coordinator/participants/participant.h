// A participant: one process of the job with a live cusnap endpoint, as the coordinator
// talks to it (protocol.h). The interface lets tests stand in fake participants.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint_client.h"
#include "common/error.h"
#include "common/messages.h"

namespace cusnap::coord {

class CheckpointDriver;  // native/native_driver.h

/// Timeouts for one request/reply exchange, in milliseconds. Read-only requests answer from
/// memory; lifecycle requests may move gigabytes and provision host memory (DRIVER-FACTS
/// "Speeds": 16 GiB of fresh host memory took up to 11 s), hence the long bound.
inline constexpr int kQueryTimeoutMs = 10'000;
inline constexpr int kLifecycleTimeoutMs = 600'000;
/// How long a participant may stay stopped (not by cusnap) while a reply is awaited before
/// the request fails naming it (EndpointParticipant), in ms.
inline constexpr int kStoppedAnswerMs = 2'000;

/// ESRCH: process `pid` exited during the command, `step` (a step's name) not done there.
Error ExitedDuringCommand(int pid, const std::string& step);

/// One of the checks, kReplyCheckMs apart, of a process a command waits for (an endpoint's
/// reply, a native call): its state letter (StoppedState) once it has been stopped at
/// kStoppedAnswerMs worth of checks in a row, nullopt before; `stopped_ms` carries the count
/// between checks and starts again whenever the process runs.
std::optional<char> StoppedTooLong(int pid, int& stopped_ms);

/// One participant's endpoint.
class Participant {
 public:
  virtual ~Participant() = default;
  /// The process id the endpoint belongs to.
  virtual int pid() const = 0;
  /// The process's start time as the system reports it (clock ticks since boot,
  /// /proc/<pid>/stat), nullopt when the process is gone. Compared with kIdentify's answer
  /// and with the state file to detect pid reuse.
  virtual std::optional<uint64_t> start_time() const = 0;
  /// Sends `request` (messages.h) and returns the reply message, whole; the reply's struct
  /// decodes it (an error reply into the shim's Error). Errors: the transport's.
  virtual Result<proto::Message> Call(const proto::Message& request, int timeout_ms) = 0;
  /// The endpoint's address for messages (the socket path); "" when it has none.
  virtual std::string endpoint() const { return {}; }
};

/// A participant reached through its Unix socket <control dir>/<pid>.sock.
std::unique_ptr<Participant> ConnectEndpoint(const std::string& control_dir, int pid);

/// What kIdentify says about a participant (messages.h).
using Identity = proto::IdentifyReply;

/// Sends kIdentify and decodes the reply. Errors name the pid; an endpoint that refuses the
/// connection (ECONNREFUSED: a socket nobody listens on, left by a process started without
/// the shim's listener or by a dead process whose pid was reused) gets an error saying so and
/// what to do, with that code.
Result<Identity> Identify(Participant& participant);

/// Sends kInspect and returns the sharing table. Errors name the pid.
Result<std::vector<proto::Record>> Inspect(Participant& participant);

/// Sends kInspect and returns the whole reply: the sharing table and the live processes that
/// fetched descriptors of what the participant created. Errors name the pid.
Result<proto::InspectReply> InspectWithImporters(Participant& participant);

/// Sends kCheckResources: does the participant have the descriptors and host memory `need`
/// says the rest of the checkpoint and the restore take? A shortfall is the shim's error
/// (code -1), naming the process, the resource, what is needed and what is available.
Result<proto::ResourcesReply> CheckResources(Participant& participant,
                                             const proto::ResourcesRequest& need);

/// Sends one lifecycle request (kQuiesce ... kActivate) and returns its reply. The error's
/// message is "pid P: <op> failed: <shim text>" (the shim's text names the resource; the
/// process is said once, error.h InContext).
Result<proto::StepReply> Step(Participant& participant, proto::Op op);
/// Step with the request's fields given (kSave: the checkpoint id); `pass_fd` (>= 0, a
/// carrier step's folder) travels with it as a copy (SCM_RIGHTS).
Result<proto::StepReply> Step(Participant& participant, const proto::StepRequest& request,
                              int pass_fd = -1);

/// Finds the participants. Tree mode refuses (Error naming the pid) when a process of the
/// tree is a CUDA process (cuCheckpointProcessGetState succeeds) without an endpoint, or
/// when the tree has no participant at all.
using Discoverer =
    std::function<Result<std::vector<std::unique_ptr<Participant>>>(CheckpointDriver&)>;

}  // namespace cusnap::coord
