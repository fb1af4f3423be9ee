// The checkpoint service of a process that uses the driver: a thread started by cuInit that
// listens on the Unix socket SIMCUDA_DIR/<pid>.sock and carries out the cuCheckpointProcess*
// calls another process makes on this one (checkpoint_api.cc is the calling side).
//
// States (CUDA Driver API, "Checkpointing"): RUNNING -lock-> LOCKED -checkpoint-> CHECKPOINTED
// -restore-> LOCKED -unlock-> RUNNING; any other transition is CUDA_ERROR_ILLEGAL_STATE.
//
// A checkpoint of a process that holds any multicast object (by handle or mapping, bound or
// not) hangs on real drivers (DRIVER-FACTS, public reports). Here the checkpoint waits (the
// lock's timeoutMs, 10 s when it had none, or SIMCUDA_MULTICAST_CHECKPOINT_WAIT_MS) and then
// fails CUDA_ERROR_TIMEOUT with nothing released: the process stays LOCKED, and after unlock it
// runs on with its memory and teams intact.
#pragma once

#include "cuda_api.h"

#include <cstdint>
#include <string>

namespace simcuda::checkpoint {

/// Operations on the wire.
enum class Op : uint32_t { kGetState = 1, kGetRestoreThreadId, kLock, kCheckpoint, kRestore, kUnlock };

inline constexpr uint32_t kRequestMagic = 0x53434b31;  // "SCK1"
inline constexpr unsigned kMaxGpuPairs = 8;

struct Request {
  uint32_t magic = kRequestMagic;
  Op op = Op::kGetState;
  uint32_t timeout_ms = 0;  // kLock: 0 = wait for ever
  uint32_t pair_count = 0;  // kRestore: entries of `pairs` in use
  CUcheckpointGpuPair pairs[kMaxGpuPairs] = {};
};

struct Reply {
  int32_t result = CUDA_SUCCESS;
  int32_t state = CU_PROCESS_STATE_RUNNING;
  int32_t restore_thread_id = 0;
};

/// The service socket of process `pid`.
std::string socket_path(int pid);
/// cuCheckpointProcessGetState and GetRestoreThreadId answered without the process's help, as
/// the real driver answers them (from its kernel side: also for a process that is frozen or
/// stopped by ptrace, as CRIU holds it): what the service of `pid` last published in
/// SIMCUDA_DIR/<pid>.state (its state and restore thread, rewritten at each request it
/// answers), into reply->state and reply->restore_thread_id; *current is false when another
/// process published them (one CRIU restored `pid` from: the caller asks the service).
/// CUDA_ERROR_INVALID_VALUE when `pid` runs no service (no such process, or no published
/// state beside its socket).
CUresult published(int pid, Reply *reply, bool *current);
/// Starts this process's service thread (once; cuInit calls it).
void start();
/// In a child after fork: the parent's service is not the child's (closes the listening socket).
void forget_after_fork();

}  // namespace simcuda::checkpoint
