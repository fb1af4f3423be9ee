// The two roles of a GPU test program talk over a SOCK_SEQPACKET socket pair that
// gpu_pair_launcher hands them (--peer-fd): fixed-size messages, at most one descriptor per
// message as SCM_RIGHTS (how an application passes a cusnap ticket, DESIGN.md "Tickets").
// Also: the descriptor table of this process, to show which descriptors an import leaves.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace gpu {

/// One message between the roles. `type` is program-defined; the rest is payload.
struct PeerMessage {
  uint32_t type = 0;
  uint32_t index = 0;
  uint64_t bytes = 0;
  uint64_t seed = 0;
  uint64_t value = 0;
};

/// Sends `message` on `socket`, with `fd` attached as SCM_RIGHTS when fd >= 0.
void SendPeer(int socket, const PeerMessage& message, int fd = -1);

/// Receives one message within `timeout_ms`; fails on timeout, EOF or a short message. The
/// attached descriptor (CLOEXEC) goes to *fd when fd is not null, else it is closed; *fd is
/// -1 when none came.
PeerMessage RecvPeer(int socket, int timeout_ms, int* fd = nullptr);

/// Receives a message and fails unless its type is `type`.
PeerMessage ExpectPeer(int socket, uint32_t type, int timeout_ms, int* fd = nullptr);

/// This process's open descriptors: number -> readlink of /proc/self/fd/<n>.
std::map<int, std::string> DescriptorTable();

/// readlink of /proc/self/fd/<fd> ("" when unreadable).
std::string DescriptorTarget(int fd);

/// Parses "--peer-fd N" style descriptor numbers; fails unless it is an open socket.
int PeerSocketFromArg(const char* text);

}  // namespace gpu
