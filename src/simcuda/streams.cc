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

// Streams and events are handles only while registered (Registry::streams or ::events); null
// and the special streams never are.
template <typename Object>
using Handles = std::set<Object *> Registry::*;

// CUDA_SUCCESS when `object` is registered in `handles`, else CUDA_ERROR_INVALID_HANDLE.
template <typename Object>
CUresult registered(Handles<Object> handles, Object *object) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return (r.*handles).count(object) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Makes a stream or event on the current context's device (`fields` follow the device) and
// registers it; the error of contexts::current_device when there is no current context.
template <typename Object, typename... Fields>
CUresult create_registered(Handles<Object> handles, Object **out, Fields... fields) {
  int device = 0;
  if (CUresult r = contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  auto *object = new Object{device, fields...};
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  (r.*handles).insert(object);
  *out = object;
  return CUDA_SUCCESS;
}

// Unregisters and frees a stream or event; CUDA_ERROR_INVALID_HANDLE when it is not registered.
template <typename Object>
CUresult destroy_registered(Handles<Object> handles, Object *object) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if ((r.*handles).erase(object) == 0) return CUDA_ERROR_INVALID_HANDLE;
  delete object;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult check(CUstream stream) {
  int device = 0;
  if (CUresult r = contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  if (special(stream)) return CUDA_SUCCESS;
  return registered(&Registry::streams, stream);
}

namespace {

CUresult check_event(CUevent event) { return registered(&Registry::events, event); }

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
  return create_registered(&Registry::streams, phStream, Flags);
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamDestroy");
  return destroy_registered(&Registry::streams, hStream);
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
  return create_registered(&Registry::events, phEvent, Flags);
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
  return destroy_registered(&Registry::events, hEvent);
}

}  // extern "C"
