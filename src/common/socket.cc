#include "common/socket.h"

#include "common/clock.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cusnap {
namespace {

int64_t NowNs() { return static_cast<int64_t>(MonotonicNs()); }

Error SystemError(int code, const std::string& what) {
  return Error{code, what + ": " + std::strerror(code)};
}

// Waits until `fd` is ready for `events` or the deadline passes (EINTR retried).
Status WaitReady(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, deadline.RemainingMs());
    if (n > 0) return Ok{};
    if (n == 0) return SystemError(ETIMEDOUT, what);
    if (errno != EINTR) return SystemError(errno, what);
  }
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void CloseReceivedFds(msghdr* msg) {
  for (cmsghdr* c = CMSG_FIRSTHDR(msg); c != nullptr; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      close(fd);
    }
  }
}

}  // namespace

Deadline Deadline::AfterMs(int ms) { return Deadline{NowNs() + static_cast<int64_t>(ms) * 1000000}; }

int Deadline::RemainingMs() const {
  const int64_t left = at_ns - NowNs();
  if (left <= 0) return 0;
  const int64_t ms = (left + 999999) / 1000000;
  return ms > 0x7fffffff ? 0x7fffffff : static_cast<int>(ms);
}

Result<UniqueFd> ConnectSeqpacket(const std::string& path, Deadline deadline) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return SystemError(ENAMETOOLONG, "socket path " + path);
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return SystemError(errno, "socket");
  for (;;) {
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return fd;
    const int code = errno;
    if (code == EINTR) continue;
    if (code == EINPROGRESS) {
      Status ready = WaitReady(fd.get(), POLLOUT, deadline, ("connect " + path).c_str());
      int so_error = 0;
      socklen_t len = sizeof so_error;
      if (ready.ok() && getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 &&
          so_error == 0) {
        return fd;
      }
      return ready.ok() ? SystemError(so_error, "connect " + path) : ready.error();
    }
    if (code != EAGAIN) return SystemError(code, "connect " + path);
    // The listener's backlog is full: a Unix socket does not queue the attempt, so try
    // again shortly (bounded by the deadline).
    if (deadline.Passed()) return SystemError(ETIMEDOUT, "connect " + path);
    poll(nullptr, 0, std::min(5, deadline.RemainingMs()));
  }
}

int SocketListenerPid(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) return 0;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return -1;  // no descriptor to ask with: no verdict on the listener
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return errno == EAGAIN ? -1 : 0;
  }
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) return -1;
  return peer.pid > 0 ? peer.pid : -1;
}

Result<UniqueFd> ListenSeqpacket(const std::string& path, int backlog) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return SystemError(ENAMETOOLONG, "socket path " + path);
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return SystemError(errno, "socket");
  // Linux creates the socket file with the socket inode's mode (less the umask): set 0600 on
  // the descriptor before bind, so the file never exists with another mode and no chmod by
  // path follows bind (a symlink swapped in between would be followed).
  if (fchmod(fd.get(), 0600) != 0) return SystemError(errno, "fchmod socket for " + path);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return SystemError(errno, "bind " + path);
  }
  if (listen(fd.get(), backlog) != 0) {
    const int code = errno;
    unlink(path.c_str());
    return SystemError(code, "listen " + path);
  }
  return fd;
}

Result<UniqueFd> AcceptConnection(int listener, Deadline deadline) {
  for (;;) {
    Status ready = WaitReady(listener, POLLIN, deadline, "accept");
    if (!ready.ok()) return ready.error();
    UniqueFd fd(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (fd.valid()) return fd;
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    return SystemError(errno, "accept");
  }
}

std::string PeerProblem(const ucred& peer, uid_t self, int expected_pid) {
  if (peer.uid != self && peer.uid != 0) {
    return "peer pid " + std::to_string(peer.pid) + " runs as uid " + std::to_string(peer.uid) +
           ", not " + std::to_string(self) + " or root: refused";
  }
  if (expected_pid > 0 && peer.pid != expected_pid) {
    return "the endpoint of pid " + std::to_string(expected_pid) + " is answered by pid " +
           std::to_string(peer.pid) + " (uid " + std::to_string(peer.uid) + "): refused";
  }
  return "";
}

Status CheckPeerCredentials(int fd, int expected_pid) {
  ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return SystemError(errno, "SO_PEERCRED");
  }
  const std::string problem = PeerProblem(cred, geteuid(), expected_pid);
  if (problem.empty()) return Ok{};
  return Error{EPERM, problem};
}

Status SendPacket(int fd, const void* data, size_t size, int pass_fd, Deadline deadline) {
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof pass_fd);
  }
  for (;;) {
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(size)) return Ok{};
    if (n >= 0) return SystemError(EPROTO, "short send");
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return SystemError(errno, "send");
    Status ready = WaitReady(fd, POLLOUT, deadline, "send");
    if (!ready.ok()) return ready;
  }
}

Result<size_t> RecvPacket(int fd, void* buffer, size_t capacity, int* received_fd,
                          Deadline deadline) {
  *received_fd = -1;
  iovec iov{buffer, capacity};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  for (;;) {
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return SystemError(errno, "receive");
      Status ready = WaitReady(fd, POLLIN, deadline, "receive");
      if (!ready.ok()) return ready.error();
      continue;
    }
    if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
      CloseReceivedFds(&msg);
      return SystemError(EMSGSIZE, "receive: packet or descriptors truncated");
    }
    int fds_seen = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        fds_seen += static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      }
    }
    if (fds_seen > 1) {
      CloseReceivedFds(&msg);
      return SystemError(EMSGSIZE, "receive: more than one descriptor");
    }
    if (fds_seen == 1) std::memcpy(received_fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
    if (n == 0 && fds_seen == 0) return SystemError(ECONNRESET, "receive: peer closed");
    return static_cast<size_t>(n);
  }
}

Status SendMessage(int fd, const proto::Message& message, Deadline deadline) {
  constexpr size_t kRoom = proto::kMaxPacket - sizeof(proto::FrameHeader);
  const std::string& payload = message.payload;
  std::vector<char> packet;
  size_t sent = 0;
  do {
    const size_t size = std::min(payload.size() - sent, kRoom);
    proto::FrameHeader header{};
    header.magic = proto::kMagic;
    header.version = proto::kVersion;
    header.op = static_cast<uint16_t>(message.op);
    header.flags = sent + size < payload.size() ? proto::kMore : 0;
    header.size = static_cast<uint32_t>(size);
    packet.resize(sizeof header + size);
    std::memcpy(packet.data(), &header, sizeof header);
    if (size > 0) std::memcpy(packet.data() + sizeof header, payload.data() + sent, size);
    Status status = SendPacket(fd, packet.data(), packet.size(),
                               sent == 0 ? message.fd.get() : -1, deadline);
    if (!status.ok()) return status;
    sent += size;
  } while (sent < payload.size());
  return Ok{};
}

namespace {

// What is wrong with `packet` (`size` bytes) as the next packet of `message`; "" when nothing.
// A foreign protocol version sets `*foreign`.
std::string CheckPacket(const std::vector<char>& packet, size_t size, bool first,
                        const proto::Message& message, size_t max_bytes,
                        proto::FrameHeader* header, bool* foreign) {
  if (size < sizeof *header) {
    return "packet of " + std::to_string(size) + " bytes is shorter than a header";
  }
  std::memcpy(header, packet.data(), sizeof *header);
  if (header->magic != proto::kMagic) return "bad magic (not a cusnap endpoint)";
  if (header->version != proto::kVersion) {
    *foreign = true;
    return "the peer speaks cusnap protocol version " + std::to_string(header->version) +
           ", this side version " + std::to_string(proto::kVersion) +
           " (a shim and a coordinator of different builds)";
  }
  if (size != sizeof *header + size_t{header->size}) {
    return "packet size does not match its header";
  }
  if (!first && header->op != static_cast<uint16_t>(message.op)) {
    return "continuation packet for another operation";
  }
  if (message.payload.size() + header->size > max_bytes) {
    return "message longer than " + std::to_string(max_bytes) + " bytes";
  }
  return "";
}

}  // namespace

Result<proto::Message> ReceiveMessage(int fd, Deadline deadline, size_t max_bytes) {
  proto::Message message;
  std::vector<char> packet(proto::kMaxPacket);
  for (bool first = true;; first = false) {
    int received = -1;
    Result<size_t> size = RecvPacket(fd, packet.data(), packet.size(), &received, deadline);
    if (!size.ok()) return size.error();
    UniqueFd descriptor(received);
    proto::FrameHeader header{};
    bool foreign = false;
    std::string problem = CheckPacket(packet, *size, first, message, max_bytes, &header, &foreign);
    if (problem.empty() && descriptor.valid() && message.fd.valid()) {
      problem = "more than one descriptor in a message";
    }
    if (!problem.empty()) {
      return Error{foreign ? EPROTONOSUPPORT : EPROTO, "protocol: " + problem};
    }
    if (first) message.op = static_cast<proto::Op>(header.op);
    if (descriptor.valid()) message.fd = std::move(descriptor);
    message.payload.append(packet.data() + sizeof header, header.size);
    if ((header.flags & proto::kMore) == 0) return message;
  }
}

}  // namespace cusnap
