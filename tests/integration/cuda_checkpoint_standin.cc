// A stand-in for NVIDIA's `cuda-checkpoint` program over the simulated driver's checkpoint API
// (src/simcuda), with the command line CRIU's CUDA plugin (plugins/cuda) runs, so that the
// plugin can be run beside cusnap's on a machine without a GPU (criu_cuda_plugin_test.cc):
//
//   cuda-checkpoint -h
//   cuda-checkpoint --get-restore-tid --pid <pid>     prints the restore thread's tid
//   cuda-checkpoint --get-state --pid <tid>           running | locked | checkpointed | failed
//   cuda-checkpoint --action lock|checkpoint|restore|unlock --pid <pid> [--timeout <ms>]
//
// Exit 0 when the driver call succeeded, 1 (its CUresult on stderr) otherwise, 2 for a bad
// command line.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

/// The process (thread group) of thread `tid`: CRIU's CUDA plugin names a process by its CUDA
/// restore thread in --get-state, which the simulated driver knows by process only.
int ProcessOf(int tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", tid);
  std::FILE* status = std::fopen(path, "r");
  if (status == nullptr) return tid;
  char line[256];
  int tgid = tid;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::sscanf(line, "Tgid: %d", &tgid) == 1) break;
  }
  std::fclose(status);
  return tgid;
}

int Fail(const char* what, CUresult rc) {
  std::fprintf(stderr, "cuda-checkpoint: %s failed: CUresult %d\n", what, static_cast<int>(rc));
  return 1;
}

const char* StateName(CUprocessState state) {
  switch (state) {
    case CU_PROCESS_STATE_RUNNING: return "running";
    case CU_PROCESS_STATE_LOCKED: return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    default: return "failed";
  }
}

int Act(const std::string& action, int pid, unsigned timeout_ms) {
  CUresult rc = CUDA_SUCCESS;
  if (action == "lock") {
    CUcheckpointLockArgs args{};
    args.timeoutMs = timeout_ms;
    rc = cuCheckpointProcessLock(pid, &args);
  } else if (action == "checkpoint") {
    CUcheckpointCheckpointArgs args{};
    rc = cuCheckpointProcessCheckpoint(pid, &args);
  } else if (action == "restore") {
    CUcheckpointRestoreArgs args{};
    rc = cuCheckpointProcessRestore(pid, &args);
  } else if (action == "unlock") {
    CUcheckpointUnlockArgs args{};
    rc = cuCheckpointProcessUnlock(pid, &args);
  } else {
    std::fprintf(stderr, "cuda-checkpoint: unknown action %s\n", action.c_str());
    return 2;
  }
  return rc == CUDA_SUCCESS ? 0 : Fail(action.c_str(), rc);
}

}  // namespace

int main(int argc, char** argv) {
  std::string action, query;
  int pid = 0;
  unsigned timeout_ms = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: cuda-checkpoint --action <lock|checkpoint|restore|unlock> --pid <pid> "
                  "[--timeout <ms>] | --get-state --pid <pid> | --get-restore-tid --pid <pid>\n");
      return 0;
    } else if (arg == "--action" && next != nullptr) {
      action = argv[++i];
    } else if (arg == "--pid" && next != nullptr) {
      pid = std::atoi(argv[++i]);
    } else if (arg == "--timeout" && next != nullptr) {
      timeout_ms = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else if (arg == "--get-state" || arg == "--get-restore-tid") {
      query = arg;
    } else {
      std::fprintf(stderr, "cuda-checkpoint: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (pid <= 0) return 2;
  pid = ProcessOf(pid);
  if (CUresult rc = cuInit(0); rc != CUDA_SUCCESS) return Fail("cuInit", rc);
  if (query == "--get-restore-tid") {
    int tid = 0;
    if (CUresult rc = cuCheckpointProcessGetRestoreThreadId(pid, &tid); rc != CUDA_SUCCESS) {
      return Fail("cuCheckpointProcessGetRestoreThreadId", rc);
    }
    std::printf("%d\n", tid);
    return 0;
  }
  if (query == "--get-state") {
    CUprocessState state{};
    if (CUresult rc = cuCheckpointProcessGetState(pid, &state); rc != CUDA_SUCCESS) {
      return Fail("cuCheckpointProcessGetState", rc);
    }
    std::printf("%s\n", StateName(state));
    return 0;
  }
  return Act(action, pid, timeout_ms);
}
