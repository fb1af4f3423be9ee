// The checkpoint service thread (checkpoint_service.h).
#include "checkpoint_service.h"

#include "config.h"
#include "devices.h"
#include "gate.h"
#include "multicast.h"
#include "streams.h"
#include "vmm_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <chrono>
#include <thread>

namespace simcuda::checkpoint {
namespace {

struct Service {
  std::mutex mutex;  // one request at a time
  CUprocessState state = CU_PROCESS_STATE_RUNNING;
  int listen_fd = -1;
  int owner_pid = 0;  // the process that bound the socket (a forked child must not unlink it)
  int thread_id = 0;
  uint32_t lock_timeout_ms = 0;  // of the lock that made the state LOCKED (0: none)
};

Service &service() {
  static Service *s = new Service;  // never destroyed: the thread runs until the process ends
  return *s;
}

void log_error(const char *what) {
  std::fprintf(stderr, "simcuda[%d]: checkpoint service: %s: %s\n", static_cast<int>(getpid()), what, std::strerror(errno));
}

// A restore with gpuPairs keeps the process's ordinals and puts each on the GPU its old GPU
// is paired with (measured on 2x H200, driver 580: DRIVER-FACTS F7). The pairs must be a
// permutation of every GPU of the machine, identity pairs included (F14: {0->0, 1->1} and
// {0->1, 1->0} work; {0->1}, {0->0}, {1->0} and {0->1, 1->1} fail CUDA_ERROR_INVALID_VALUE
// and leave the process CHECKPOINTED, restorable again). The table is changed before the
// memory comes back, so the memory is accounted on the new GPUs, and put back when the
// restore fails.
CUresult restore(const Request &req) {
  if (req.pair_count > kMaxGpuPairs) return CUDA_ERROR_INVALID_VALUE;
  std::array<int, kMaxDevices> onto{};  // physical GPU -> physical GPU
  for (int p = 0; p < kMaxDevices; ++p) onto[static_cast<size_t>(p)] = p;
  if (req.pair_count > 0) {
    if (req.pair_count != static_cast<uint32_t>(devices::physical_count())) return CUDA_ERROR_INVALID_VALUE;
    std::array<bool, kMaxDevices> from_seen{}, to_seen{};
    for (uint32_t i = 0; i < req.pair_count; ++i) {
      auto from = devices::find_physical(req.pairs[i].oldUuid);
      auto to = devices::find_physical(req.pairs[i].newUuid);
      if (!from || !to) return CUDA_ERROR_INVALID_VALUE;  // names a GPU this machine does not have
      if (from_seen[static_cast<size_t>(*from)] || to_seen[static_cast<size_t>(*to)]) return CUDA_ERROR_INVALID_VALUE;
      from_seen[static_cast<size_t>(*from)] = to_seen[static_cast<size_t>(*to)] = true;
      onto[static_cast<size_t>(*from)] = *to;
    }
  }
  const devices::PhysicalTable before = devices::physical_table();
  devices::PhysicalTable after = before;
  std::array<bool, kMaxDevices> taken{};
  for (int d = 0; d < devices::count(); ++d) {
    const int p = onto[static_cast<size_t>(before[static_cast<size_t>(d)])];
    if (taken[static_cast<size_t>(p)]) return CUDA_ERROR_INVALID_VALUE;  // two ordinals on one GPU
    taken[static_cast<size_t>(p)] = true;
    after[static_cast<size_t>(d)] = p;
  }
  devices::set_physical_table(after);
  const CUresult r = vmm::restore_all();
  if (r != CUDA_SUCCESS) devices::set_physical_table(before);
  return r;
}

// The checkpoint of a process holding multicast objects: waits as long as the real driver's
// hang is modelled to last, then fails (checkpoint_service.h).
CUresult refuse_multicast(const Service &s) {
  long wait_ms = config().multicast_checkpoint_wait_ms;
  if (wait_ms < 0) wait_ms = s.lock_timeout_ms != 0 ? s.lock_timeout_ms : 10000;
  std::fprintf(stderr,
               "simcuda[%d]: checkpoint: the process holds %zu multicast object(s); a real driver hangs here, "
               "failing CUDA_ERROR_TIMEOUT after %ld ms\n",
               static_cast<int>(getpid()), multicast::count(), wait_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  return CUDA_ERROR_TIMEOUT;
}

// cuCheckpointProcessLock: no new calls, the calls in flight returned, and, like the real
// driver, the work queued on every stream finished, all within `timeout_ms` (0: no limit).
// CUDA_ERROR_TIMEOUT, the process running on as before, when the streams did not go idle.
CUresult lock_with_streams_idle(unsigned timeout_ms) {
  const auto start = std::chrono::steady_clock::now();
  if (CUresult r = gate::lock(timeout_ms); r != CUDA_SUCCESS) return r;
  unsigned left = 0;
  if (timeout_ms != 0) {
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    left = spent.count() >= timeout_ms ? 1 : timeout_ms - static_cast<unsigned>(spent.count());
  }
  if (streams::wait_idle(left)) return CUDA_SUCCESS;
  std::fprintf(stderr, "simcuda[%d]: lock: stream work still running after %u ms; not locked\n",
               static_cast<int>(getpid()), timeout_ms);
  gate::unlock();
  return CUDA_ERROR_TIMEOUT;
}

std::string state_path(int pid) { return config().dir + "/" + std::to_string(pid) + ".state"; }

/// What published() reads: the state and restore thread of the process that started at
/// `start_time`, whole (a new file renamed over the old one, so that no reader meets half of
/// it).
struct Published {
  uint32_t magic = kRequestMagic;
  int32_t state = CU_PROCESS_STATE_RUNNING;
  int32_t restore_thread_id = 0;
  uint64_t start_time = 0;
};

/// Field 22 of /proc/<pid>/stat (clock ticks after boot); 0 when it cannot be read.
uint64_t start_time_of(int pid) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = std::strrchr(buf, ')');
  for (int field = 2; p != nullptr && field < 22; ++field) p = std::strchr(p + 1, ' ');
  return p == nullptr ? 0 : std::strtoull(p + 1, nullptr, 10);
}

void publish(const Service &s) {
  const int pid = static_cast<int>(getpid());
  const std::string path = state_path(pid), temporary = path + ".new";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    log_error(("publish " + temporary).c_str());
    return;
  }
  Published p;
  p.state = s.state;
  p.restore_thread_id = s.thread_id;
  p.start_time = start_time_of(pid);
  const bool written = write(fd, &p, sizeof p) == static_cast<ssize_t>(sizeof p);
  close(fd);
  if (!written || rename(temporary.c_str(), path.c_str()) != 0) log_error(("publish " + path).c_str());
}

Reply handle(Service &s, const Request &req) {
  Reply reply;
  switch (req.op) {
    case Op::kGetState:
      break;
    case Op::kGetRestoreThreadId:
      reply.restore_thread_id = s.thread_id;
      break;
    case Op::kLock:
      if (s.state != CU_PROCESS_STATE_RUNNING) reply.result = CUDA_ERROR_ILLEGAL_STATE;
      else if ((reply.result = lock_with_streams_idle(req.timeout_ms)) == CUDA_SUCCESS) {
        s.state = CU_PROCESS_STATE_LOCKED;
        s.lock_timeout_ms = req.timeout_ms;
      }
      break;
    case Op::kCheckpoint:
      if (s.state != CU_PROCESS_STATE_LOCKED) reply.result = CUDA_ERROR_ILLEGAL_STATE;
      else if (multicast::count() > 0) reply.result = refuse_multicast(s);
      else if ((reply.result = vmm::checkpoint_all()) == CUDA_SUCCESS) s.state = CU_PROCESS_STATE_CHECKPOINTED;
      break;
    case Op::kRestore:
      // An importer stays CHECKPOINTED when its restore fails (DRIVER-FACTS F5).
      if (s.state != CU_PROCESS_STATE_CHECKPOINTED) reply.result = CUDA_ERROR_ILLEGAL_STATE;
      else if ((reply.result = restore(req)) == CUDA_SUCCESS) s.state = CU_PROCESS_STATE_LOCKED;
      break;
    case Op::kUnlock:
      if (s.state != CU_PROCESS_STATE_LOCKED) {
        reply.result = CUDA_ERROR_ILLEGAL_STATE;
      } else {
        gate::unlock();
        s.state = CU_PROCESS_STATE_RUNNING;
      }
      break;
    default:
      reply.result = CUDA_ERROR_INVALID_VALUE;
  }
  // Every answer republishes: a process CRIU restored keeps the published state of the one
  // it was dumped from, which published() takes as stale (another start time) until then.
  publish(s);
  reply.state = s.state;
  return reply;
}

bool peer_allowed(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == getuid() || cred.uid == 0;
}

void serve(int listen_fd) {
  Service &s = service();
  {
    std::lock_guard lock(s.mutex);
    s.thread_id = static_cast<int>(syscall(SYS_gettid));
    publish(s);
  }
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EBADF || errno == EINVAL) return;  // closed after fork
      log_error("accept");
      continue;
    }
    // A client that connects and sends nothing must not hold the service for ever.
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    Request req;
    ssize_t n = peer_allowed(fd) ? recv(fd, &req, sizeof req, 0) : -1;
    if (n == static_cast<ssize_t>(sizeof req) && req.magic == kRequestMagic) {
      Reply reply;
      {
        std::lock_guard lock(s.mutex);
        reply = handle(s, req);
      }
      if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof reply)) log_error("send");
    }
    close(fd);
  }
}

__attribute__((destructor)) void remove_socket() {
  Service &s = service();
  if (s.owner_pid != 0 && s.owner_pid == getpid()) {
    unlink(socket_path(s.owner_pid).c_str());
    unlink(state_path(s.owner_pid).c_str());
  }
}

}  // namespace

std::string socket_path(int pid) { return config().dir + "/" + std::to_string(pid) + ".sock"; }

CUresult published(int pid, Reply *reply, bool *current) {
  struct stat st{};
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM) || stat(socket_path(pid).c_str(), &st) != 0)
    return CUDA_ERROR_INVALID_VALUE;  // no driver in that process
  const int fd = open(state_path(pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  Published p;
  const bool read_whole = read(fd, &p, sizeof p) == static_cast<ssize_t>(sizeof p);
  close(fd);
  if (!read_whole || p.magic != kRequestMagic) return CUDA_ERROR_INVALID_VALUE;
  reply->state = p.state;
  reply->restore_thread_id = p.restore_thread_id;
  *current = p.start_time != 0 && p.start_time == start_time_of(pid);
  return CUDA_SUCCESS;
}

void start() {
  Service &s = service();
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    log_error("socket");
    return;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = socket_path(getpid());
  if (path.size() >= sizeof addr.sun_path) {
    std::fprintf(stderr, "simcuda[%d]: checkpoint service: socket path %s is too long\n", static_cast<int>(getpid()), path.c_str());
    close(fd);
    return;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());  // left by an earlier process with this pid
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || listen(fd, 16) != 0) {
    log_error(("bind/listen " + path).c_str());
    close(fd);
    return;
  }
  s.listen_fd = fd;
  s.owner_pid = getpid();
  std::thread(serve, fd).detach();
}

void forget_after_fork() {
  Service &s = service();
  if (s.listen_fd >= 0) close(s.listen_fd);
  s.listen_fd = -1;
  s.state = CU_PROCESS_STATE_RUNNING;
}

}  // namespace simcuda::checkpoint
