// Peer messages with descriptor passing, and the descriptor table (gpu_peer.h).
#include "gpu/gpu_peer.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "gpu/gpu_check.h"

namespace gpu {

void SendPeer(int socket, const PeerMessage& message, int fd) {
  iovec iov{const_cast<PeerMessage*>(&message), sizeof message};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  }
  ssize_t sent;
  do {
    sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof message)) {
    Fail("sending message type %u to the peer: %s", message.type,
         sent < 0 ? std::strerror(errno) : "short send");
  }
}

PeerMessage RecvPeer(int socket, int timeout_ms, int* fd) {
  if (fd != nullptr) *fd = -1;
  pollfd p{socket, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) Fail("no message from the peer within %d ms", timeout_ms);
  if (ready < 0) Fail("poll on the peer socket: %s", std::strerror(errno));

  PeerMessage message{};
  iovec iov{&message, sizeof message};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do {
    got = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got == 0) Fail("the peer closed the socket (it exited; see its lines above)");
  if (got < 0) Fail("receiving from the peer: %s", std::strerror(errno));
  if (got != static_cast<ssize_t>(sizeof message) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    Fail("malformed message from the peer (%zd bytes, flags 0x%x)", got, msg.msg_flags);
  }
  int passed = -1;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
      std::memcpy(&passed, CMSG_DATA(cmsg), sizeof passed);
    }
  }
  if (fd != nullptr) {
    *fd = passed;
  } else if (passed >= 0) {
    close(passed);
  }
  return message;
}

PeerMessage ExpectPeer(int socket, uint32_t type, int timeout_ms, int* fd) {
  PeerMessage message = RecvPeer(socket, timeout_ms, fd);
  if (message.type != type) Fail("expected message type %u from the peer, got %u", type, message.type);
  return message;
}

std::string DescriptorTarget(int fd) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  char target[4096];
  const ssize_t n = readlink(path, target, sizeof target - 1);
  if (n < 0) return "";
  target[n] = '\0';
  return target;
}

std::map<int, std::string> DescriptorTable() {
  std::map<int, std::string> table;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) Fail("opendir /proc/self/fd: %s", std::strerror(errno));
  const int own = dirfd(dir);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    if (fd == own) continue;
    table[fd] = DescriptorTarget(fd);
  }
  closedir(dir);
  return table;
}

int PeerSocketFromArg(const char* text) {
  const int fd = std::atoi(text);
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    Fail("--peer-fd %s is not an open socket (start the program through gpu_pair_launcher)", text);
  }
  return fd;
}

}  // namespace gpu
