// Client side of the endpoint protocol (protocol.h): one request, one (possibly
// multi-packet) reply, every socket operation under a deadline. Used by the coordinator for
// lifecycle requests and by a shim to ask a creator's endpoint for a fresh export.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/error.h"
#include "common/messages.h"

namespace cusnap {

/// Path of a process's endpoint socket: <control dir>/<pid>.sock.
std::string EndpointPath(const std::string& control_dir, int pid);

/// The control directory: $CUSNAP_CONTROL_DIR, else $XDG_RUNTIME_DIR/cusnap, else
/// /tmp/cusnap-<uid> (DESIGN.md, "Environment"). Does not create it.
std::string ControlDir();

/// ControlDir's rule for given values (null or empty: unset) and uid: also how the
/// coordinator names the control directory of another process from its environment.
std::string ControlDirFor(const char* cusnap_control_dir, const char* xdg_runtime_dir,
                          unsigned uid);

/// The pid an endpoint socket path names ("<dir>/<pid>.sock"); 0 for any other name.
int EndpointPidOfPath(const std::string& socket_path);

/// Connects to `socket_path`, sends `request` and returns the reply message, whole (its
/// descriptor, if any, owned by it). Refuses (EPERM, ELOOP; nothing sent) when the socket's
/// directory is not ours with mode 0700 or is a symbolic link (control_dir.h), or when the
/// peer runs as another user (root aside) or, for "<pid>.sock", is not process pid. Fails with an errno-coded Error naming the path on a
/// socket or framing problem or when `timeout_ms` (whole exchange) passes. The reply is not
/// read here: its struct's Decode (messages.h) turns an error reply into its Error.
/// `still_waiting`, when given, is called about every kReplyCheckMs while no reply has come:
/// a text it returns ends the wait at once, as an Error (code EHOSTDOWN) with that text (the
/// coordinator's check that the endpoint's process can still answer: participant.cc).
Result<proto::Message> Request(const std::string& socket_path, const proto::Message& request,
                               int timeout_ms,
                               const std::function<std::string()>& still_waiting = {});

/// How often Request asks `still_waiting` while a reply is awaited, in ms.
inline constexpr int kReplyCheckMs = 500;

/// Request(), then the reply decoded as `Reply` (a reply struct of messages.h; `args` are
/// what its Decode takes after the message, e.g. the op for proto::StepReply). An error
/// reply comes back as the endpoint's Error, whole.
template <typename Reply, typename... Args>
Result<Reply> Request(const std::string& socket_path, const proto::Message& request,
                      int timeout_ms, Args... args) {
  Result<proto::Message> message = Request(socket_path, request, timeout_ms);
  if (!message.ok()) return message.error();
  return Reply::Decode(*message, args...);
}

/// Asks the endpoint of `id`'s creator (EndpointPath(ControlDir(), id.creator_pid)) for a
/// fresh raw POSIX descriptor of object `id` of kind `kind` (1 unicast, 2 multicast; see
/// ticket.h), proving it holds a ticket with `capability` (the creator refuses any other).
/// On success the reply holds the descriptor and the object's size in bytes.
/// Errors: the creator's refusal (its status, e.g. CUDA_ERROR_INVALID_HANDLE for an object it
/// no longer exports or a wrong capability), a socket errno, or EPROTO when the reply carries
/// no descriptor or answers for another object; messages name the object.
Result<proto::ExportReply> RequestExport(const proto::ObjectId& id, uint32_t kind,
                                         const proto::Capability& capability, int timeout_ms);

}  // namespace cusnap
