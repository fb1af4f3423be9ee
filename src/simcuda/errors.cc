// cuGetErrorName / cuGetErrorString for the results simcuda returns (and the common others).
#include "api_call.h"

namespace simcuda {
namespace {

struct ErrorText {
  CUresult result;
  const char *name;
  const char *text;
};

#define SIMCUDA_ERROR(code, text) {code, #code, text}
const ErrorText kErrors[] = {
    SIMCUDA_ERROR(CUDA_SUCCESS, "no error"),
    SIMCUDA_ERROR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    SIMCUDA_ERROR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    SIMCUDA_ERROR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    SIMCUDA_ERROR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    SIMCUDA_ERROR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    SIMCUDA_ERROR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    SIMCUDA_ERROR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    SIMCUDA_ERROR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    SIMCUDA_ERROR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_READY, "device not ready"),
    SIMCUDA_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    SIMCUDA_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    SIMCUDA_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    SIMCUDA_ERROR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    SIMCUDA_ERROR(CUDA_ERROR_TIMEOUT, "timeout"),
    SIMCUDA_ERROR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef SIMCUDA_ERROR

const ErrorText *find(CUresult result) {
  for (const ErrorText &e : kErrors)
    if (e.result == result) return &e;
  return nullptr;
}

}  // namespace
}  // namespace simcuda

extern "C" {

CUresult cuGetErrorName(CUresult error, const char **pStr) {
  SIMCUDA_CALL("cuGetErrorName");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto *e = simcuda::find(error);
  *pStr = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
  SIMCUDA_CALL("cuGetErrorString");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto *e = simcuda::find(error);
  *pStr = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
