// Socket and descriptor-passing helpers for the endpoint protocol (protocol.h): SOCK_SEQPACKET
// Unix sockets, every operation under a deadline (poll), EINTR retried, MSG_NOSIGNAL on every
// send (the shim lives in other people's processes and never changes their signal
// dispositions), SOCK_CLOEXEC / MSG_CMSG_CLOEXEC on every descriptor. Errors are errno-coded.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol.h"

namespace cusnap {

/// A point in CLOCK_MONOTONIC time (ns) by which an operation must finish.
struct Deadline {
  int64_t at_ns = 0;
  /// The deadline `ms` milliseconds from now.
  static Deadline AfterMs(int ms);
  /// Milliseconds left (rounded up, at least 0): a poll(2) timeout.
  int RemainingMs() const;
  bool Passed() const { return RemainingMs() == 0; }
};

/// Connects a SOCK_SEQPACKET socket to `path`, retrying while the listener's backlog is full
/// (EAGAIN) until `deadline`. Returns the connected descriptor (CLOEXEC) or an Error
/// (ENOENT / ECONNREFUSED when nobody listens there, ETIMEDOUT, ENAMETOOLONG).
Result<int> ConnectSeqpacket(const std::string& path, Deadline deadline);

/// Binds a non-blocking SOCK_SEQPACKET listener at `path` (which must not exist), makes it
/// mode 0600 and listens. Returns the descriptor (CLOEXEC) or an Error.
Result<int> ListenSeqpacket(const std::string& path, int backlog);

/// Waits (until `deadline`) for a connection on `listener` and accepts it (CLOEXEC).
/// ETIMEDOUT when none came.
Result<int> AcceptConnection(int listener, Deadline deadline);

/// The peer's credentials (SO_PEERCRED) allow it to talk to us: same effective uid or root.
/// Error EPERM names the peer's pid and uid otherwise.
Status CheckPeerCredentials(int fd);

/// Sends one packet of `size` bytes (MSG_NOSIGNAL), with `pass_fd` as SCM_RIGHTS when >= 0.
/// A closed peer gives EPIPE (never SIGPIPE); a full socket waits until `deadline`.
Status SendPacket(int fd, const void* data, size_t size, int pass_fd, Deadline deadline);

/// Receives one packet into `buffer` (at most `capacity` bytes); returns its size. A
/// descriptor that came with it is stored in `*received_fd` (CLOEXEC; -1 when none; the
/// caller owns it). Errors: ETIMEDOUT, ECONNRESET (peer closed), EMSGSIZE (packet or
/// control data truncated, more than one descriptor; any descriptors received are closed).
Result<size_t> RecvPacket(int fd, void* buffer, size_t capacity, int* received_fd,
                          Deadline deadline);

/// A whole protocol message: the last packet's header, the records of every packet, and the
/// descriptor that came with it (-1 when none; the receiver owns and closes it).
struct Message {
  proto::Header header{};
  std::vector<proto::Record> records;
  int fd = -1;
};

/// Sends `header` (magic and version filled in) and `records`, split into packets of at most
/// proto::kMaxRecordsPerMessage records, all but the last flagged proto::kMore. `pass_fd`
/// (when >= 0) travels with the first packet.
Status SendMessage(int fd, proto::Header header, std::span<const proto::Record> records,
                   int pass_fd, Deadline deadline);

/// Receives one message (all its packets) and validates magic, version, packet sizes and
/// that every packet echoes the first one's op. EPROTO names what was wrong.
Result<Message> ReceiveMessage(int fd, Deadline deadline);

/// A zero-filled header for `op` with magic and version set.
proto::Header MakeHeader(proto::Op op);

/// Copies `text` into header.text, truncated and NUL-terminated.
void SetHeaderText(proto::Header& header, const std::string& text);

}  // namespace cusnap
