// The quiesce gate (quiesce.h). Admission is a Dekker-style handshake between Enter (count
// the call, then look at the state) and Close (set the state, then wait for the count to
// drain), both sequentially consistent, so a call is either seen by Close or sees the
// closed gate; never neither.
#include "shim/lifecycle/quiesce.h"

#include <unistd.h>

#include <chrono>

#include "common/log.h"
#include "common/text.h"

namespace cusnap::shim {
namespace {

// Per thread: depth of tracked calls in progress (nested hooks pass without counting),
// whether the outermost one was counted, and GateBypass nesting.
thread_local uint32_t t_depth = 0;
thread_local bool t_counted = false;
thread_local uint32_t t_bypass = 0;

}  // namespace

CUresult QuiesceGate::Enter() {
  if (t_depth > 0) {
    ++t_depth;
    return CUDA_SUCCESS;
  }
  if (t_bypass > 0) {
    t_depth = 1;
    t_counted = false;
    return CUDA_SUCCESS;
  }
  for (;;) {
    in_flight_.fetch_add(1, std::memory_order_seq_cst);
    if (state_.load(std::memory_order_seq_cst) == kOpen) {
      t_depth = 1;
      t_counted = true;
      return CUDA_SUCCESS;
    }
    // Not admitted: undo the count (the closer may be waiting for exactly this) and wait.
    if (in_flight_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      std::lock_guard lock(mutex_);
      changed_.notify_all();
    }
    const int64_t wait_ms = wait_ms_.load(std::memory_order_relaxed);
    std::unique_lock lock(mutex_);
    if (state_.load() == kFailed) {
      CUSNAP_LOG_ERROR("a tracked driver call failed with CUDA_ERROR_NOT_READY: the shim "
                       "is FAILED after an unsuccessful checkpoint or restore");
      return CUDA_ERROR_NOT_READY;
    }
    ++waiting_;
    const auto reopened = [this] { return state_.load() != kClosed; };
    bool opened = true;
    if (wait_ms < 0) {
      changed_.wait(lock, reopened);
    } else {
      opened = changed_.wait_for(lock, std::chrono::milliseconds(wait_ms), reopened);
    }
    --waiting_;
    if (!opened) {
      CUSNAP_LOG_ERROR("a tracked driver call waited %lld ms for a checkpoint or restore "
                       "to finish and fails with CUDA_ERROR_NOT_READY",
                       static_cast<long long>(wait_ms));
      return CUDA_ERROR_NOT_READY;
    }
    // Opened or failed: try again (a FAILED gate is reported in the next round).
  }
}

void QuiesceGate::Leave() {
  if (--t_depth > 0 || !t_counted) return;
  t_counted = false;
  if (in_flight_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      state_.load(std::memory_order_seq_cst) != kOpen) {
    std::lock_guard lock(mutex_);
    changed_.notify_all();
  }
}

Status QuiesceGate::Close(int64_t drain_ms) {
  state_.store(kClosed, std::memory_order_seq_cst);
  std::unique_lock lock(mutex_);
  const bool drained = changed_.wait_for(lock, std::chrono::milliseconds(drain_ms), [this] {
    return in_flight_.load(std::memory_order_seq_cst) == 0;
  });
  if (drained) return Ok{};
  const uint32_t busy = in_flight_.load();
  state_.store(kOpen, std::memory_order_seq_cst);
  changed_.notify_all();
  return Error{CUDA_ERROR_NOT_READY,
               ProcessText(getpid()) + ": " + std::to_string(busy) +
                   " tracked driver call(s) still in flight after " +
                   std::to_string(drain_ms) + " ms; not quiesced, the job goes on"};
}

void QuiesceGate::Open() {
  std::lock_guard lock(mutex_);
  state_.store(kOpen, std::memory_order_seq_cst);
  changed_.notify_all();
}

void QuiesceGate::Fail() {
  std::lock_guard lock(mutex_);
  state_.store(kFailed, std::memory_order_seq_cst);
  changed_.notify_all();
}

uint32_t QuiesceGate::waiting() const {
  std::lock_guard lock(mutex_);
  return waiting_;
}

GateBypass::GateBypass() { ++t_bypass; }
GateBypass::~GateBypass() { --t_bypass; }

}  // namespace cusnap::shim
