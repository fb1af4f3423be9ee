// Streams, events and stream capture (streams.h; CUDA Driver API, "Stream Management",
// "Event Management", "Graph Management": stream capture).
#include "streams.h"

#include "api_call.h"
#include "contexts.h"
#include "ipc_events.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace simcuda::streams {
namespace {

// What a created stream runs and records. Shared by the handle, the worker thread and any
// waiter, so a stream destroyed while work is queued finishes that work (as CUDA's does) and
// its state goes away with the last of them.
struct Queue {
  int device = 0;
  unsigned flags = 0;
  std::mutex mutex;
  std::condition_variable changed;  // work queued, work finished, or stop
  std::deque<Work> work;
  bool running = false;
  bool stop = false;
  bool worker_started = false;
  CUresult error = CUDA_SUCCESS;  // the first failure since the last synchronisation
  bool capturing = false;
  cuuint64_t capture_id = 0;
  Captured captured;

  bool idle() const { return work.empty() && !running; }
};

// Runs `q`'s next queued work with the lock released; its failure becomes the stream's error.
void run_next(std::unique_lock<std::mutex> &lock, Queue &q) {
  Work next = std::move(q.work.front());
  q.work.pop_front();
  q.running = true;
  lock.unlock();
  const CUresult r = next();
  lock.lock();
  if (r != CUDA_SUCCESS && q.error == CUDA_SUCCESS) q.error = r;
  q.running = false;
  q.changed.notify_all();
}

// Runs a stream's work in order until it is destroyed and drained.
void run(std::shared_ptr<Queue> q) {
  std::unique_lock lock(q->mutex);
  for (;;) {
    q->changed.wait(lock, [&] { return !q->work.empty() || q->stop; });
    if (q->work.empty()) return;
    run_next(lock, *q);
  }
}

}  // namespace
}  // namespace simcuda::streams

struct CUstream_st {
  std::shared_ptr<simcuda::streams::Queue> queue;
};
struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  int pending = 0;         // records queued on a stream and not yet reached (Registry::mutex)
  bool destroyed = false;  // cuEventDestroy came while records were pending: the last frees it
  simcuda::ipc_events::Hold ipc;  // an interprocess event's shared counters (ipc_events.h)
  ~CUevent_st() { simcuda::ipc_events::drop(ipc); }
};

namespace simcuda::streams {
namespace {

struct Registry {
  std::mutex mutex;
  std::condition_variable event_reached;
  std::map<CUstream, std::shared_ptr<Queue>> streams;
  std::set<CUevent> events;
  cuuint64_t next_capture_id = 1;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: workers may outlive static destructors
  return *r;
}

bool special(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

// The queue of a created stream (nullptr for the special streams and unknown handles).
std::shared_ptr<Queue> queue_of(CUstream stream) {
  if (special(stream)) return nullptr;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  auto found = r.streams.find(stream);
  return found != r.streams.end() ? found->second : nullptr;
}

std::vector<std::shared_ptr<Queue>> all_queues() {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::shared_ptr<Queue>> queues;
  for (auto &[stream, queue] : r.streams) queues.push_back(queue);
  return queues;
}

// Waits until `q` is idle, at most until `deadline` (nullopt: no limit); its error, cleared.
CUresult drain(Queue &q, const std::chrono::steady_clock::time_point *deadline, bool *timed_out) {
  std::unique_lock lock(q.mutex);
  auto idle = [&] { return q.idle(); };
  if (deadline == nullptr) {
    q.changed.wait(lock, idle);
  } else if (!q.changed.wait_until(lock, *deadline, idle)) {
    if (timed_out != nullptr) *timed_out = true;
    return CUDA_ERROR_NOT_READY;
  }
  const CUresult error = q.error;
  q.error = CUDA_SUCCESS;
  return error;
}

CUresult check_event(CUevent event) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return r.events.count(event) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// Marks `event` as reached by its stream (the event object lives while records are pending,
// even after cuEventDestroy).
CUresult reach(CUevent event) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (event->pending > 0) --event->pending;
  if (event->ipc.shared != nullptr) ++event->ipc.shared->reached;
  if (event->destroyed && event->pending == 0) delete event;
  r.event_reached.notify_all();
  return CUDA_SUCCESS;
}

CUresult record(CUevent event, CUstream stream) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  if (CUresult r = check_event(event); r != CUDA_SUCCESS) return r;
  {
    Registry &r = registry();
    std::lock_guard lock(r.mutex);
    event->recorded = true;
    ++event->pending;
    if (event->ipc.shared != nullptr) ++event->ipc.shared->recorded;
  }
  return submit(stream, [event] { return reach(event); });
}

// Waits until every record of `event` queued so far was reached (by any process, for an
// interprocess event).
CUresult wait_event(CUevent event) {
  Registry &r = registry();
  std::unique_lock lock(r.mutex);
  if (r.events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (event->ipc.shared != nullptr) {
    const simcuda::ipc_events::Shared &shared = *event->ipc.shared;
    lock.unlock();
    simcuda::ipc_events::wait_reached(shared);
    return CUDA_SUCCESS;
  }
  r.event_reached.wait(lock, [&] { return r.events.count(event) == 0 || event->pending == 0; });
  return CUDA_SUCCESS;
}

// The legacy default stream waits for every blocking stream of the device (CUDA's implicit
// synchronisation); the per-thread stream has nothing queued.
CUresult synchronize_special(CUstream stream) {
  if (stream == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
  int device = 0;
  if (CUresult r = contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  CUresult first = CUDA_SUCCESS;
  for (const auto &q : all_queues()) {
    if (q->device != device || (q->flags & CU_STREAM_NON_BLOCKING) != 0) continue;
    const CUresult r = drain(*q, nullptr, nullptr);
    if (first == CUDA_SUCCESS) first = r;
  }
  return first;
}

}  // namespace

CUresult check(CUstream stream) {
  int device = 0;
  if (CUresult r = contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  if (special(stream)) return CUDA_SUCCESS;
  return queue_of(stream) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult submit(CUstream stream, Work work) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  if (q == nullptr) return work();
  std::unique_lock lock(q->mutex);
  if (q->capturing) {
    q->captured.push_back(std::move(work));
    return CUDA_SUCCESS;
  }
  q->work.push_back(std::move(work));
  if (!q->worker_started) {
    try {
      std::thread(run, q).detach();
      q->worker_started = true;
    } catch (const std::system_error &) {
      // No thread can start in this process (a thread limit, a full address space): the
      // real driver's streams never need one of the application's threads, so the work
      // runs now, in order; the next submission tries to start the worker again.
      while (!q->work.empty() && !q->running) run_next(lock, *q);
    }
  }
  q->changed.notify_all();
  return CUDA_SUCCESS;
}

CUresult begin_capture(CUstream stream) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  if (q == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  cuuint64_t id = 0;
  {
    Registry &r = registry();
    std::lock_guard lock(r.mutex);
    id = r.next_capture_id++;
  }
  std::lock_guard lock(q->mutex);
  if (q->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  q->capturing = true;
  q->capture_id = id;
  q->captured.clear();
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream stream, Captured *work) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  if (q == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  std::lock_guard lock(q->mutex);
  if (!q->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  q->capturing = false;
  q->capture_id = 0;
  *work = std::move(q->captured);
  q->captured.clear();
  return CUDA_SUCCESS;
}

CUresult capture_status(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  bool capturing = false;
  cuuint64_t capture_id = 0;
  if (q != nullptr) {
    std::lock_guard lock(q->mutex);
    capturing = q->capturing;
    capture_id = q->capture_id;
  }
  if (status != nullptr) *status = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id != nullptr) *id = capture_id;
  return CUDA_SUCCESS;
}

CUresult synchronize(CUstream stream) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  if (q == nullptr) return synchronize_special(stream);
  {
    std::lock_guard lock(q->mutex);
    if (q->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return drain(*q, nullptr, nullptr);
}

CUresult query(CUstream stream) {
  if (CUresult r = check(stream); r != CUDA_SUCCESS) return r;
  std::shared_ptr<Queue> q = queue_of(stream);
  if (q == nullptr) return CUDA_SUCCESS;
  std::lock_guard lock(q->mutex);
  return q->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult synchronize_device(int device) {
  CUresult first = CUDA_SUCCESS;
  for (const auto &q : all_queues()) {
    if (q->device != device) continue;
    const CUresult r = drain(*q, nullptr, nullptr);
    if (first == CUDA_SUCCESS) first = r;
  }
  return first;
}

bool wait_idle(unsigned timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (const auto &q : all_queues()) {
    bool timed_out = false;
    std::unique_lock lock(q->mutex);
    auto idle = [&] { return q->idle(); };
    if (timeout_ms == 0) {
      q->changed.wait(lock, idle);
    } else {
      timed_out = !q->changed.wait_until(lock, deadline, idle);
    }
    if (timed_out) return false;
  }
  return true;
}

}  // namespace simcuda::streams

using namespace simcuda::streams;  // NOLINT: entry points below are the module's exports

namespace {

CUresult create_stream(CUstream *phStream, unsigned flags) {
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  auto queue = std::make_shared<Queue>();
  queue->device = device;
  queue->flags = flags;
  auto *stream = new CUstream_st{queue};
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  r.streams.emplace(stream, std::move(queue));
  *phStream = stream;
  return CUDA_SUCCESS;
}

// Unregisters the stream; queued work still runs (its worker holds the queue), then stops.
CUresult destroy_stream(CUstream stream) {
  std::shared_ptr<Queue> q;
  {
    Registry &r = registry();
    std::lock_guard lock(r.mutex);
    auto found = r.streams.find(stream);
    if (found == r.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    q = std::move(found->second);
    r.streams.erase(found);
  }
  delete stream;
  std::lock_guard lock(q->mutex);
  q->stop = true;
  q->changed.notify_all();
  return CUDA_SUCCESS;
}

CUresult capture_info(CUstream stream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                      const CUgraphNode **dependencies, const CUgraphEdgeData **edges, size_t *count) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_status(stream, status, id); r != CUDA_SUCCESS) return r;
  if (graph != nullptr) *graph = nullptr;
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuStreamCreate");
  if (phStream == nullptr || (Flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) return CUDA_ERROR_INVALID_VALUE;
  return create_stream(phStream, Flags);
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  SIMCUDA_CALL_INITIALIZED("cuStreamDestroy");
  return destroy_stream(hStream);
}

SIMCUDA_BOTH_FORMS(CUresult, cuStreamSynchronize, "cuStreamSynchronize", (CUstream hStream),
                   { return synchronize(hStream); })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamQuery, "cuStreamQuery", (CUstream hStream), { return query(hStream); })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamWaitEvent, "cuStreamWaitEvent",
                   (CUstream hStream, CUevent hEvent, unsigned int Flags), {
                     if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
                     if (CUresult r = check_event(hEvent); r != CUDA_SUCCESS) return r;
                     // An event destroyed meanwhile counts as reached, as in CUDA.
                     return submit(hStream, [hEvent] {
                       wait_event(hEvent);
                       return CUDA_SUCCESS;
                     });
                   })

SIMCUDA_BOTH_FORMS(CUresult, cuStreamIsCapturing, "cuStreamIsCapturing",
                   (CUstream hStream, CUstreamCaptureStatus *captureStatus), {
                     if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
                     return capture_status(hStream, captureStatus, nullptr);
                   })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo",
                   (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out),
                   { return capture_info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr); })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamGetCaptureInfo_v2, "cuStreamGetCaptureInfo",
                   (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                    CUgraph *graph_out, const CUgraphNode **dependencies_out, size_t *numDependencies_out),
                   {
                     return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                         nullptr, numDependencies_out);
                   })
SIMCUDA_BOTH_FORMS(CUresult, cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo",
                   (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                    CUgraph *graph_out, const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
                    size_t *numDependencies_out),
                   {
                     return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                         edgeData_out, numDependencies_out);
                   })

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuEventCreate");
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  // An interprocess event must not time (CUDA Driver API, cuEventCreate).
  const bool interprocess = (Flags & CU_EVENT_INTERPROCESS) != 0;
  if (interprocess && (Flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto *event = new CUevent_st{device, Flags, false, 0, false, {}};
  if (interprocess) {
    if (CUresult made = simcuda::ipc_events::create(&event->ipc); made != CUDA_SUCCESS) {
      delete event;
      return made;
    }
  }
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  r.events.insert(event);
  *phEvent = event;
  return CUDA_SUCCESS;
}

SIMCUDA_BOTH_FORMS(CUresult, cuEventRecord, "cuEventRecord", (CUevent hEvent, CUstream hStream),
                   { return record(hEvent, hStream); })

CUresult cuEventSynchronize(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventSynchronize");
  return wait_event(hEvent);
}

CUresult cuEventQuery(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventQuery");
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.events.count(hEvent) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (const auto *shared = hEvent->ipc.shared)
    return shared->reached.load() >= shared->recorded.load() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  return hEvent->pending == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
  SIMCUDA_CALL_INITIALIZED("cuIpcGetEventHandle");
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (event->ipc.shared == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not made INTERPROCESS
  simcuda::ipc_events::describe(event->ipc, pHandle);
  return CUDA_SUCCESS;
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
  SIMCUDA_CALL_INITIALIZED("cuIpcOpenEventHandle");
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  simcuda::ipc_events::Hold hold;
  if (CUresult r = simcuda::ipc_events::open(handle, &hold); r != CUDA_SUCCESS) return r;
  auto *event = new CUevent_st{device, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, false, 0, false, hold};
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  r.events.insert(event);
  *phEvent = event;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  SIMCUDA_CALL_INITIALIZED("cuEventDestroy");
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.events.erase(hEvent) == 0) return CUDA_ERROR_INVALID_HANDLE;
  // As in CUDA, records still queued complete; the last one frees the event.
  if (hEvent->pending == 0) {
    delete hEvent;
  } else {
    hEvent->destroyed = true;
  }
  r.event_reached.notify_all();
  return CUDA_SUCCESS;
}

}  // extern "C"
