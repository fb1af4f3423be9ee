// A participant: one process of the job with a live cusnap endpoint, as the coordinator
// talks to it (protocol.h). The interface lets tests stand in fake participants.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/endpoint_client.h"
#include "common/error.h"
#include "common/protocol.h"

namespace cusnap::coord {

/// Timeouts for one request/reply exchange, in milliseconds. Read-only requests answer from
/// memory; lifecycle requests may move gigabytes and provision host memory (DRIVER-FACTS
/// "Speeds": 16 GiB of fresh host memory took up to 11 s), hence the long bound.
inline constexpr int kQueryTimeoutMs = 10'000;
inline constexpr int kLifecycleTimeoutMs = 600'000;

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
  /// Sends `request` (op and args set; magic/version filled in by the transport) and
  /// returns the complete reply; a reply with nonzero status comes back as an Error with
  /// that status and the shim's text.
  virtual Result<Reply> Call(const proto::Header& request, int timeout_ms) = 0;
  /// The endpoint's address for messages (the socket path); "" when it has none.
  virtual std::string endpoint() const { return {}; }
};

/// A participant reached through its Unix socket <control dir>/<pid>.sock.
std::unique_ptr<Participant> ConnectEndpoint(const std::string& control_dir, int pid);

/// What kIdentify says about a participant (protocol.h: reply arg[0..5] and records).
struct Identity {
  int pid = 0;
  uint64_t start_time = 0;          ///< clock ticks since boot
  uint32_t phase = 0;               ///< proto::Phase
  uint64_t records = 0;             ///< records INSPECT would return
  uint64_t untracked_imports = 0;   ///< live imports of descriptors that were not tickets
  /// The kUntrackedImport records describing them (at most proto::kMaxUntrackedReported
  /// imports; an older shim sends none).
  std::vector<proto::Record> untracked;
  uint64_t tracked_bytes = 0;       ///< bytes of tracked allocations this process created
  uint32_t created_total = 0;       ///< tracked cuMemCreate calls over the process's life
  uint32_t created_host_numa = 0;   ///< of which HOST_NUMA
  std::string failure;              ///< the sticky FAILED text, if any
};

/// A request header for `op` with `args` (zero-filled otherwise).
proto::Header MakeRequest(proto::Op op, std::initializer_list<uint64_t> args = {});

/// Sends kIdentify and parses the reply (records of other kinds than kUntrackedImport are
/// ignored). Errors name the pid; an endpoint that refuses the connection (ECONNREFUSED: a
/// socket nobody listens on, left by a process started without the shim's listener or by a
/// dead process whose pid was reused) gets an error saying so and what to do, with that code.
Result<Identity> Identify(Participant& participant);

/// Sends kInspect and returns the sharing table. Errors name the pid.
Result<std::vector<proto::Record>> Inspect(Participant& participant);

/// What a lifecycle request reported: the shim's phase after it, and for carrier requests
/// (SAVE, REALLOCATE) the bytes moved and the copy time (reply arg[0] bytes, arg[1] time of
/// the whole step in ns, arg[2] copy time in ns).
struct StepReply {
  uint32_t phase = 0;
  uint64_t bytes = 0;
  uint64_t step_ns = 0;
  uint64_t copy_ns = 0;
};

/// Sends one lifecycle request (kQuiesce ... kActivate) with request `args` and returns its
/// reply. The error's message is "pid P: <op> failed: <shim text>" (the shim's text names
/// the resource).
Result<StepReply> Step(Participant& participant, proto::Op op,
                       std::initializer_list<uint64_t> args = {});

}  // namespace cusnap::coord
