// Streams and events (streams.h; CUDA Driver API, "Stream Management", "Event Management").
#include "streams.h"

#include "api_call.h"
#include "contexts.h"

#include <mutex>
#include <set>

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
};
struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
};

namespace simcuda::streams {
namespace {

struct Registry {
  std::mutex mutex;
  std::set<CUstream> streams;
  std::set<CUevent> events;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed
  return *r;
}

bool special(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

}  // namespace

CUresult check(CUstream stream) {
  int device = 0;
  if (CUresult r = contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  if (special(stream)) return CUDA_SUCCESS;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return r.streams.count(stream) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

namespace {

CUresult check_event(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return r.events.count(event) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult record(CUevent event, CUstream stream) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_event(event); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(registry().mutex);
  event->recorded = true;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda::streams

using namespace simcuda::streams;  // NOLINT: entry points below are the module's exports

extern "C" {

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuStreamCreate");
  if (phStream == nullptr || (Flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  auto *s = new CUstream_st{device, Flags};
  std::lock_guard lock(registry().mutex);
  registry().streams.insert(s);
  *phStream = s;
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamDestroy");
  if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(registry().mutex);
  if (registry().streams.erase(hStream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete hStream;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamSynchronize");
  return check(hStream);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamSynchronize");
  return check(hStream);
}

CUresult cuStreamQuery(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamQuery");
  return check(hStream);
}

CUresult cuStreamQuery_ptsz(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamQuery");
  return check(hStream);
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuEventCreate");
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  auto *e = new CUevent_st{device, Flags, false};
  std::lock_guard lock(registry().mutex);
  registry().events.insert(e);
  *phEvent = e;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuEventRecord");
  return record(hEvent, hStream);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuEventRecord");
  return record(hEvent, hStream);
}

CUresult cuEventSynchronize(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventSynchronize");
  return check_event(hEvent);
}

CUresult cuEventQuery(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventQuery");
  return check_event(hEvent);
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventDestroy");
  std::lock_guard lock(registry().mutex);
  if (hEvent == nullptr || registry().events.erase(hEvent) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete hEvent;
  return CUDA_SUCCESS;
}

}  // extern "C"
