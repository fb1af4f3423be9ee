// Socket and descriptor-passing helpers for the endpoint protocol (protocol.h): SOCK_SEQPACKET
// Unix sockets, every operation under a deadline (poll), EINTR retried, MSG_NOSIGNAL on every
// send (the shim lives in other people's processes and never changes their signal
// dispositions), SOCK_CLOEXEC / MSG_CMSG_CLOEXEC on every descriptor. Errors are errno-coded.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/messages.h"
#include "common/unique_fd.h"

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
Result<UniqueFd> ConnectSeqpacket(const std::string& path, Deadline deadline);

/// Binds a non-blocking SOCK_SEQPACKET listener at `path` (which must not exist), created
/// mode 0600 (set on the socket before bind: no window, no chmod by path), and listens. Returns the descriptor (CLOEXEC) or an Error.
/// The pid (as this process's PID namespace numbers it) of the process listening on the
/// seqpacket socket at `path`: SO_PEERCRED of a connection its backlog accepted (closed at
/// once). 0 when none listens; -1 when one does but its backlog is full (pid unknown), or
/// when this process has no descriptor to ask with. An
/// endpoint whose listener is not the pid in its name belongs to a job in a PID namespace of
/// its own (cli/pid_namespace.h).
int SocketListenerPid(const std::string& path);

Result<UniqueFd> ListenSeqpacket(const std::string& path, int backlog);

/// Waits (until `deadline`) for a connection on `listener` and accepts it (CLOEXEC).
/// ETIMEDOUT when none came.
Result<UniqueFd> AcceptConnection(int listener, Deadline deadline);

/// What is wrong with a peer of credentials `peer` for a process of effective uid `self`:
/// "" when it runs as `self` or root and, when `expected_pid` > 0, is process `expected_pid`;
/// otherwise the reason, naming the peer's pid and uid.
std::string PeerProblem(const ucred& peer, uid_t self, int expected_pid);

/// The peer's credentials (SO_PEERCRED) pass PeerProblem: same effective uid or root, and
/// process `expected_pid` when it is > 0 (a client checks that the endpoint of pid P is
/// served by P, not by whoever bound the path). Error EPERM naming the peer otherwise.
Status CheckPeerCredentials(int fd, int expected_pid = 0);

/// Sends one packet of `size` bytes (MSG_NOSIGNAL), with `pass_fd` as SCM_RIGHTS when >= 0.
/// A closed peer gives EPIPE (never SIGPIPE); a full socket waits until `deadline`.
Status SendPacket(int fd, const void* data, size_t size, int pass_fd, Deadline deadline);

/// Receives one packet into `buffer` (at most `capacity` bytes); returns its size. A
/// descriptor that came with it is stored in `*received_fd` (CLOEXEC; -1 when none; the
/// caller owns it). Errors: ETIMEDOUT, ECONNRESET (peer closed), EMSGSIZE (packet or
/// control data truncated, more than one descriptor; any descriptors received are closed).
Result<size_t> RecvPacket(int fd, void* buffer, size_t capacity, int* received_fd,
                          Deadline deadline);

/// Sends `message`: its payload split into packets of at most proto::kMaxPacket bytes, all
/// but the last flagged proto::kMore; its descriptor (when it holds one; still owned by the
/// message) travels with the first packet.
Status SendMessage(int fd, const proto::Message& message, Deadline deadline);

/// Receives one message (all its packets) and validates magic, version, packet sizes, that
/// every packet carries the first one's op, and that the payload stays within `max_bytes`
/// (an endpoint reading requests passes a small bound: a peer cannot make it hold much). A
/// peer of another protocol version is EPROTONOSUPPORT, naming both versions; anything else
/// wrong is EPROTO, naming what.
Result<proto::Message> ReceiveMessage(int fd, Deadline deadline,
                                      size_t max_bytes = proto::kMaxMessage);

}  // namespace cusnap
