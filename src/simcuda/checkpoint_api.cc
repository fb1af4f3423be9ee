// cuCheckpointProcess*: the calling side of the checkpoint service (checkpoint_service.h). Each
// call connects to the target's service socket, sends one request and waits for its reply (as
// long as the operation takes, like the real driver).
//
// Choices where the real driver is not documented: a pid with no service (no such process, or
// a process that never called cuInit) gives CUDA_ERROR_INVALID_VALUE, as do nonzero reserved
// fields. These calls need no cuInit in the calling process and do not wait at its gate.
#include "checkpoint_service.h"
#include "faults.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace simcuda::checkpoint {
namespace {

template <typename T>
bool all_zero(const T &bytes) {
  const auto *p = reinterpret_cast<const unsigned char *>(&bytes);
  for (size_t i = 0; i < sizeof bytes; ++i)
    if (p[i] != 0) return false;
  return true;
}

// Sends `req` to `pid`'s checkpoint service and waits for its reply (stored in `*reply` when
// not null). The service's result, or CUDA_ERROR_INVALID_VALUE when there is none or it died.
CUresult call(int pid, const Request &req, Reply *reply = nullptr) {
  Reply ignored;
  if (reply == nullptr) reply = &ignored;
  if (pid <= 0) return CUDA_ERROR_INVALID_VALUE;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = socket_path(pid);
  if (path.size() >= sizeof addr.sun_path) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    close(fd);
    return CUDA_ERROR_INVALID_VALUE;  // no driver in that process
  }
  ssize_t n = send(fd, &req, sizeof req, MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(sizeof req)) {
    do n = recv(fd, reply, sizeof *reply, 0);
    while (n < 0 && errno == EINTR);
  }
  close(fd);
  // The target died or closed the connection mid-request.
  return n == static_cast<ssize_t>(sizeof *reply) ? static_cast<CUresult>(reply->result) : CUDA_ERROR_INVALID_VALUE;
}

// A request with nothing but its operation.
CUresult simple(int pid, Op op, Reply *reply = nullptr) {
  Request req;
  req.op = op;
  return call(pid, req, reply);
}

// The state and restore thread: what `pid` published, without its help; asked of its service
// when another process published them (CRIU restored `pid` from that one's memory).
CUresult query(int pid, Op op, Reply *reply) {
  bool current = false;
  if (CUresult r = published(pid, reply, &current); r != CUDA_SUCCESS || current) return r;
  return simple(pid, op, reply);
}

}  // namespace
}  // namespace simcuda::checkpoint

namespace ck = simcuda::checkpoint;

// Fault and delay injection apply here too (by api name); the process gate does not.
#define SIMCUDA_CHECKPOINT_CALL(api_name) \
  if (auto injected = simcuda::faults::on_call(api_name)) return *injected

extern "C" {

CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessGetState");
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ck::Reply reply;
  const CUresult r = ck::query(pid, ck::Op::kGetState, &reply);
  if (r == CUDA_SUCCESS) *state = static_cast<CUprocessState>(reply.state);
  return r;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessGetRestoreThreadId");
  if (tid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ck::Reply reply;
  const CUresult r = ck::query(pid, ck::Op::kGetRestoreThreadId, &reply);
  if (r == CUDA_SUCCESS) *tid = reply.restore_thread_id;
  return r;
}

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessLock");
  ck::Request req;
  req.op = ck::Op::kLock;
  if (args != nullptr) {
    if (args->reserved0 != 0 || !ck::all_zero(args->reserved1)) return CUDA_ERROR_INVALID_VALUE;
    req.timeout_ms = args->timeoutMs;
  }
  return ck::call(pid, req);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessCheckpoint");
  if (args != nullptr && !ck::all_zero(args->reserved)) return CUDA_ERROR_INVALID_VALUE;
  return ck::simple(pid, ck::Op::kCheckpoint);
}

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessRestore");
  ck::Request req;
  req.op = ck::Op::kRestore;
  if (args != nullptr) {
    if (!ck::all_zero(args->reserved) || args->reserved1 != 0) return CUDA_ERROR_INVALID_VALUE;
    if (args->gpuPairsCount > ck::kMaxGpuPairs || (args->gpuPairsCount > 0 && args->gpuPairs == nullptr))
      return CUDA_ERROR_INVALID_VALUE;
    req.pair_count = args->gpuPairsCount;
    for (unsigned i = 0; i < args->gpuPairsCount; ++i) req.pairs[i] = args->gpuPairs[i];
  }
  return ck::call(pid, req);
}

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args) {
  SIMCUDA_CHECKPOINT_CALL("cuCheckpointProcessUnlock");
  if (args != nullptr && !ck::all_zero(args->reserved)) return CUDA_ERROR_INVALID_VALUE;
  return ck::simple(pid, ck::Op::kUnlock);
}

}  // extern "C"
