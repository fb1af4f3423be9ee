// The quiesce gate (quiesce.h). Admission is a Dekker-style handshake between Enter (mark
// the calling thread's flag, then look at the state) and Close (set the state, then look at
// every thread's flag), so a call is either seen by Close or sees the closed gate; never
// neither. The open path must be cheap (every launch passes it), so the two sides are
// asymmetric: Enter orders its store and load with a compiler barrier only, and Close makes
// up for it with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full memory
// barrier on every thread of the process that is running at that moment (a thread that is
// not running has no store in flight). Where membarrier is unavailable (old kernel, seccomp)
// both sides use sequentially consistent fences instead.
//
// Per-thread flags: one ThreadSlot per thread, from a process-wide list that only grows (a
// slot is reused after its thread ended); a slot holds the id of the gate its thread is
// inside (0: none), so any number of gates (tests make several) share the slots.
#include "shim/lifecycle/quiesce.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include "common/log.h"
#include "common/text.h"

namespace cusnap::shim {
namespace {

struct ThreadSlot;

// Per thread: depth of driver calls in progress (nested hooks pass without counting), whether
// the outermost one was counted, GateBypass nesting, and the thread's slot. One plain struct
// in the initial-exec TLS model: the shim is preloaded, and every access is then one
// instruction off the thread pointer instead of a __tls_get_addr call per variable.
struct ThreadState {
  uint32_t depth;
  uint32_t bypass;
  bool counted;
  ThreadSlot* slot;
};
__attribute__((tls_model("initial-exec"))) thread_local ThreadState t_state{0, 0, false, nullptr};

struct ThreadSlot {
  std::atomic<uint64_t> gate{0};   // id of the gate this thread is inside
  std::atomic<bool> in_use{true};  // false once the thread ended: the slot may be reused
};

// Never destroyed: application threads use their slots while exit handlers run.
struct Slots {
  std::mutex mutex;
  std::vector<ThreadSlot*> all;  // guarded by mutex; slots are never freed
};
Slots& slots() {
  static Slots* s = new Slots;
  return *s;
}

// Releases the calling thread's slot for reuse when the thread ends (touched only when the
// slot is taken, so the open path never pays for its registration).
struct SlotRelease {
  ThreadSlot* slot = nullptr;
  ~SlotRelease() {
    if (slot != nullptr) {
      slot->gate.store(0, std::memory_order_relaxed);
      slot->in_use.store(false, std::memory_order_release);
    }
  }
};
thread_local SlotRelease t_slot_release;

ThreadSlot* TakeSlot() {
  Slots& s = slots();
  std::lock_guard lock(s.mutex);
  ThreadSlot* taken = nullptr;
  for (ThreadSlot* slot : s.all) {
    bool free = false;
    if (slot->in_use.compare_exchange_strong(free, true)) {
      taken = slot;
      break;
    }
  }
  if (taken == nullptr) {
    taken = new ThreadSlot;
    s.all.push_back(taken);
  }
  t_slot_release.slot = taken;
  return taken;
}

inline ThreadSlot& MySlot() {
  if (__builtin_expect(t_state.slot == nullptr, 0)) t_state.slot = TakeSlot();
  return *t_state.slot;
}

long Membarrier(int command) { return syscall(SYS_membarrier, command, 0, 0); }

// Registers the process for expedited membarriers; true when they work here.
bool RegisterMembarrier() {
  if (Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return false;
  return Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

std::atomic<uint64_t> g_next_gate_id{1};

}  // namespace

QuiesceGate::QuiesceGate()
    : id_(g_next_gate_id.fetch_add(1, std::memory_order_relaxed)), asymmetric_(RegisterMembarrier()) {}

CUresult QuiesceGate::Enter() {
  if (t_state.depth > 0) {
    ++t_state.depth;
    return CUDA_SUCCESS;
  }
  if (t_state.bypass > 0) {
    t_state.depth = 1;
    t_state.counted = false;
    return CUDA_SUCCESS;
  }
  ThreadSlot& slot = MySlot();
  for (;;) {
    slot.gate.store(id_, std::memory_order_relaxed);
    if (asymmetric_) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // Close's membarrier does the rest
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (state_.load(std::memory_order_relaxed) == kOpen) {
      t_state.depth = 1;
      t_state.counted = true;
      return CUDA_SUCCESS;
    }
    // Not admitted: clear the flag (the closer may be waiting for exactly this) and wait.
    slot.gate.store(0, std::memory_order_release);
    const int64_t wait_ms = wait_ms_.load(std::memory_order_relaxed);
    std::unique_lock lock(mutex_);
    changed_.notify_all();
    if (state_.load() == kFailed) {
      CUSNAP_LOG_ERROR("a driver call failed with CUDA_ERROR_NOT_READY: the shim is FAILED "
                       "after an unsuccessful checkpoint or restore");
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
      CUSNAP_LOG_ERROR("a driver call waited %lld ms for a checkpoint or restore to finish "
                       "and fails with CUDA_ERROR_NOT_READY",
                       static_cast<long long>(wait_ms));
      return CUDA_ERROR_NOT_READY;
    }
    // Opened or failed: try again (a FAILED gate is reported in the next round).
  }
}

void QuiesceGate::Leave() {
  if (--t_state.depth > 0 || !t_state.counted) return;
  t_state.counted = false;
  t_state.slot->gate.store(0, std::memory_order_release);
  if (state_.load(std::memory_order_relaxed) != kOpen) {
    std::lock_guard lock(mutex_);
    changed_.notify_all();
  }
}

uint32_t QuiesceGate::in_flight() const {
  Slots& s = slots();
  std::lock_guard lock(s.mutex);
  uint32_t count = 0;
  for (const ThreadSlot* slot : s.all) {
    if (slot->gate.load(std::memory_order_acquire) == id_) ++count;
  }
  return count;
}

Status QuiesceGate::Close(int64_t drain_ms) {
  state_.store(kClosed, std::memory_order_seq_cst);
  // Every thread that marked its flag before seeing the state has its mark visible now, and
  // every thread that marks it later sees kClosed.
  if (!asymmetric_ || Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // A call that leaves while the gate closes may miss the notification (it read the state
  // before the store): poll too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms);
  uint32_t busy = in_flight();
  std::unique_lock lock(mutex_);
  while (busy != 0 && std::chrono::steady_clock::now() < deadline) {
    changed_.wait_for(lock, std::chrono::milliseconds(1));
    lock.unlock();
    busy = in_flight();
    lock.lock();
  }
  if (busy == 0) return Ok{};
  state_.store(kOpen, std::memory_order_seq_cst);
  changed_.notify_all();
  return Error{CUDA_ERROR_NOT_READY,
               ProcessText(getpid()) + ": " + std::to_string(busy) +
                   " tracked driver call(s) still in flight after " + std::to_string(drain_ms) +
                   " ms; not quiesced, the job goes on"};
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

GateBypass::GateBypass() { ++t_state.bypass; }
GateBypass::~GateBypass() { --t_state.bypass; }

}  // namespace cusnap::shim
