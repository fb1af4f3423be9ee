// Message texts shared by the shim and the coordinator (text.h).
#include "common/text.h"

#include <cuda.h>
#include <unistd.h>

#include <cstdio>

namespace cusnap {
namespace {

// The results cusnap meets most, for a driver that names none (or is not there to ask).
const char* CommonCuResultName(int result) {
  switch (static_cast<CUresult>(result)) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_STATE: return "CUDA_ERROR_ILLEGAL_STATE";
    case CUDA_ERROR_TIMEOUT: return "CUDA_ERROR_TIMEOUT";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

}  // namespace

std::string ThisProcess() { return ProcessText(static_cast<int>(getpid())); }

namespace {
int (*g_caller_pid_lookup)(int) = nullptr;
}  // namespace

void SetCallerPidLookup(int (*lookup)(int pid)) { g_caller_pid_lookup = lookup; }

int CallerPid(int pid) {
  if (g_caller_pid_lookup == nullptr || pid <= 0) return pid;
  const int caller = g_caller_pid_lookup(pid);
  return caller > 0 ? caller : pid;
}

std::string ProcessText(int pid) { return ProcessText(pid, ""); }

std::string PidOption(int pid) { return "--pid " + std::to_string(CallerPid(pid)); }

std::string ProcessText(int pid, std::string_view name) {
  const int caller = CallerPid(pid);
  std::string beside(name);
  if (caller != pid) {
    beside += (beside.empty() ? "" : "; ") + std::string("pid ") + std::to_string(pid) +
              " in the job's PID namespace";
  }
  return "pid " + std::to_string(caller) + (beside.empty() ? "" : " (" + beside + ")");
}

std::string CuResultText(int result, const char* driver_name) {
  const char* name = driver_name != nullptr ? driver_name : CommonCuResultName(result);
  const std::string number = std::to_string(result);
  return name != nullptr ? std::string(name) + " (" + number + ")" : "CUresult " + number;
}

std::string VaRangeText(uint64_t address, uint64_t size) {
  char text[64];
  std::snprintf(text, sizeof text, "[0x%llx, +%llu)", static_cast<unsigned long long>(address),
                static_cast<unsigned long long>(size));
  return text;
}

std::string FormatGpuUuid(const unsigned char b[16]) {
  char out[64];
  std::snprintf(out, sizeof out,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

}  // namespace cusnap
