// Drain before save (drain.h).
#include "shim/lifecycle/drain.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/text.h"
#include "shim/lifecycle/quiesce.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

// One context to synchronise; a primary context retained only for this drain is released
// after.
struct Target {
  CUcontext context;
  CUdevice primary_of;  // -1: a context the application created
};

// The helper thread's progress, shared with it: a drain that gives up leaves the thread
// running on (it ends when the device work does) and must not free what it reads.
struct SyncJob {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  CUresult result = CUDA_SUCCESS;
  int device = -1;  // the device being synchronised now (the one still busy at a deadline)
};

// What the drain thread is handed; it owns this and frees it when it ends.
struct SyncWork {
  const DriverApi* api;
  std::vector<Target> targets;
  std::shared_ptr<SyncJob> job;
};

void ReleasePrimaries(const DriverApi& api, const std::vector<Target>& targets) {
  for (const Target& target : targets) {
    if (target.primary_of >= 0) api.cuDevicePrimaryCtxRelease_v2(target.primary_of);
  }
}

void SynchronizeAll(const DriverApi& api, const std::vector<Target>& targets,
                    const std::shared_ptr<SyncJob>& job) {
  // A shim thread: should the driver reach an exported entry point from inside (the shim's
  // wrapper then), it must not wait at the gate this drain runs behind.
  GateBypass bypass;
  CUresult first = CUDA_SUCCESS;
  for (const Target& target : targets) {
    CUresult r = api.cuCtxPushCurrent_v2(target.context);
    if (r == CUDA_SUCCESS) {
      CUdevice device = -1;
      if (api.cuCtxGetDevice(&device) == CUDA_SUCCESS) {
        std::lock_guard lock(job->mutex);
        job->device = device;
      }
      r = api.cuCtxSynchronize();
      CUcontext popped = nullptr;
      api.cuCtxPopCurrent_v2(&popped);
    }
    if (first == CUDA_SUCCESS) first = r;
  }
  ReleasePrimaries(api, targets);
  std::lock_guard lock(job->mutex);
  job->result = first;
  job->done = true;
  job->finished.notify_all();
}

}  // namespace

void DeviceWork::CaptureBegan(CUstream stream) {
  std::lock_guard lock(mutex_);
  captures_[stream] = static_cast<pid_t>(syscall(SYS_gettid));
}

void DeviceWork::CaptureEnded(CUstream stream, bool still_capturing) {
  if (still_capturing) return;
  std::lock_guard lock(mutex_);
  captures_.erase(stream);
}

void DeviceWork::ContextCreated(CUcontext context) {
  std::lock_guard lock(mutex_);
  created_.insert(context);
}

void DeviceWork::ContextDestroyed(CUcontext context) {
  std::lock_guard lock(mutex_);
  created_.erase(context);
}

Status DeviceWork::Drain(const DriverApi& api, int64_t deadline_ms) {
  std::vector<Target> targets;
  {
    std::lock_guard lock(mutex_);
    if (!captures_.empty()) {
      char stream[32];
      std::snprintf(stream, sizeof stream, "%p", static_cast<void*>(captures_.begin()->first));
      return Error{CUDA_ERROR_NOT_READY,
                   ThisProcess() + ": stream " + stream + " is capturing (begun by thread " +
                       std::to_string(captures_.begin()->second) + ", " +
                       std::to_string(captures_.size()) +
                       " capture(s) open); a checkpoint waits until the capture ends; not "
                       "quiesced, the job goes on"};
    }
    for (CUcontext context : created_) targets.push_back({context, -1});
  }
  if (api.cuCtxPushCurrent_v2 == nullptr || api.cuCtxPopCurrent_v2 == nullptr ||
      api.cuCtxSynchronize == nullptr || api.cuCtxGetDevice == nullptr) {
    return Error{CUDA_ERROR_NOT_INITIALIZED,
                 ThisProcess() + ": the driver lacks the context calls a drain needs"};
  }
  int count = 0;
  if (api.cuDeviceGetCount != nullptr && api.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  for (CUdevice device = 0; device < count; ++device) {
    unsigned flags = 0;
    int active = 0;
    CUcontext primary = nullptr;
    if (api.cuDevicePrimaryCtxGetState == nullptr ||
        api.cuDevicePrimaryCtxGetState(device, &flags, &active) != CUDA_SUCCESS || active == 0 ||
        api.cuDevicePrimaryCtxRetain(&primary, device) != CUDA_SUCCESS) {
      continue;
    }
    targets.push_back({primary, device});
  }
  auto job = std::make_shared<SyncJob>();
  // The synchronisation runs on a thread of its own so that a device that never finishes
  // (a kernel waiting for a peer held at its gate) ends in an answer at the deadline.
  auto* work = new SyncWork{&api, std::move(targets), job};
  pthread_t thread;
  if (!StartQuietThread(&thread,
                        [](void* arg) -> void* {
                          auto* w = static_cast<SyncWork*>(arg);
                          SynchronizeAll(*w->api, w->targets, w->job);
                          delete w;
                          return nullptr;
                        },
                        work)) {
    ReleasePrimaries(api, work->targets);
    delete work;
    return Error{CUDA_ERROR_NOT_READY, ThisProcess() +
                                           ": no thread could be started to synchronise the "
                                           "devices before save; not quiesced, the job goes on"};
  }
  pthread_detach(thread);
  std::unique_lock lock(job->mutex);
  if (!job->finished.wait_for(lock, std::chrono::milliseconds(deadline_ms), [&] { return job->done; })) {
    return Error{CUDA_ERROR_NOT_READY,
                 ThisProcess() + ": device " + std::to_string(job->device) +
                     " still has work in flight after " + std::to_string(deadline_ms) +
                     " ms (a kernel may be waiting for a peer held at its gate); not quiesced, "
                     "the job goes on"};
  }
  if (job->result != CUDA_SUCCESS) {
    return Error{job->result, ThisProcess() + ": synchronising device " +
                                  std::to_string(job->device) + " before save failed: " +
                                  ResultText(api, job->result)};
  }
  return Ok{};
}

}  // namespace cusnap::shim
