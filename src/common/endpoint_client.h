// Client side of the endpoint protocol (protocol.h): one request, one (possibly
// multi-packet) reply, every socket operation under a deadline. Used by the coordinator for
// lifecycle requests and by a shim to ask a creator's endpoint for a fresh export.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol.h"

namespace cusnap {

/// A complete reply: the last packet's header, every record of every packet, and the
/// descriptor that came with it (kExport only; -1 otherwise; the caller owns and closes it).
struct Reply {
  proto::Header header{};
  std::vector<proto::Record> records;
  int fd = -1;
};

/// Path of a process's endpoint socket: <control dir>/<pid>.sock.
std::string EndpointPath(const std::string& control_dir, int pid);

/// The control directory: $CUSNAP_CONTROL_DIR, else $XDG_RUNTIME_DIR/cusnap, else
/// /tmp/cusnap-<uid> (DESIGN.md, "Environment"). Does not create it.
std::string ControlDir();

/// Connects to `socket_path`, sends `request` (magic and version filled in) followed by
/// `records`, and collects the reply. Fails with an errno-coded Error on a socket problem or
/// when `timeout_ms` (whole exchange) passes; a reply with nonzero status comes back as an
/// Error carrying that status and the reply's text.
Result<Reply> Request(const std::string& socket_path, proto::Header request,
                      std::span<const proto::Record> records, int timeout_ms);

/// Asks the endpoint of `id`'s creator (EndpointPath(ControlDir(), id.creator_pid)) for a
/// fresh raw POSIX descriptor of object `id` of kind `kind` (1 unicast, 2 multicast; see
/// ticket.h). On success the reply carries the descriptor (the caller owns and closes it)
/// and arg[4] = the object's size in bytes. Errors: the creator's refusal (its status, e.g.
/// CUDA_ERROR_INVALID_HANDLE for an object it no longer exports), a socket errno, or EPROTO
/// when the reply carries no descriptor for that object; messages name the object.
Result<Reply> RequestExport(const proto::ObjectId& id, uint32_t kind, int timeout_ms);

}  // namespace cusnap
