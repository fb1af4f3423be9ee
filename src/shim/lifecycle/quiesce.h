// The quiesce gate: while a checkpoint or restore is taking the sharing apart and putting it
// back, application calls to tracked entry points wait here instead of touching a table that
// is half rebuilt (DESIGN.md, "Lifecycle"). Every tracked hook in vmm.cc enters the
// process's gate first (CUSNAP_QUIESCE_GATE(), process.h); the lifecycle closes it at
// kQuiesce and opens it at kResume or kActivate.
//
// Every driver entry point passes it (the generated wrappers, hooks/gated.cc), launches
// included, so the open path must stay near one atomic load (DESIGN.md: under 5 ns): a call
// marks a flag of its own thread and reads the state, with no shared counter and no locked
// instruction; the closing side pays instead, with membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
// (quiesce.cc says why that is enough).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "common/error.h"
#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// Process-wide gate in front of the tracked entry points. Thread-safe.
class QuiesceGate {
 public:
  QuiesceGate();

  /// How long an application call waits at a closed gate: for as long as a command holds
  /// the job (a call the driver would have accepted never fails because of cusnap; the
  /// lease, lifecycle.h, opens the gate when the command died before changing anything).
  static constexpr int64_t kWaitForever = -1;

  /// Called on entry to a tracked hook. CUDA_SUCCESS: proceed, and call Leave() once done.
  /// CUDA_ERROR_NOT_READY (after logging why): the gate stayed closed for a wait bound a
  /// test set (set_wait_ms), or Fail() was called (no wait then); do not call Leave(). Nested tracked calls
  /// on one thread, and threads inside a GateBypass, pass without counting.
  CUresult Enter();
  /// Ends a call that Enter() admitted.
  void Leave();

  /// Closes the gate and waits, at most `drain_ms`, for admitted calls to leave. On timeout
  /// the gate is opened again and an Error (code CUDA_ERROR_NOT_READY) says how many calls
  /// were still in flight; nothing else changed.
  Status Close(int64_t drain_ms);
  /// Opens the gate: waiting calls proceed, new calls pass.
  void Open();
  /// The shim is FAILED for good: tracked calls fail at once with CUDA_ERROR_NOT_READY.
  void Fail();

  /// True between Close() and Open().
  bool closed() const { return state_.load(std::memory_order_acquire) != kOpen; }
  /// Calls admitted and not yet left.
  uint32_t in_flight() const;
  /// Calls now waiting at the closed gate (tests use it to know a call is parked).
  uint32_t waiting() const;

  /// Changes how long application calls wait at a closed gate (ms; kWaitForever: no bound,
  /// the default); tests bound it.
  void set_wait_ms(int64_t ms) { wait_ms_.store(ms, std::memory_order_relaxed); }

 private:
  enum State : uint32_t { kOpen = 0, kClosed = 1, kFailed = 2 };

  std::atomic<uint32_t> state_{kOpen};
  const uint64_t id_;       // what a thread's flag holds while it is inside this gate
  const bool asymmetric_;   // membarrier available: the open path needs no fence
  std::atomic<int64_t> wait_ms_{kWaitForever};
  mutable std::mutex mutex_;
  std::condition_variable changed_;  // gate opened/failed, or the last admitted call left
  uint32_t waiting_ = 0;             // guarded by mutex_
};

/// Lets the current thread past the gate while it lives: the control thread runs lifecycle
/// work that may go through the shim's own hooks while the gate is closed.
class GateBypass {
 public:
  GateBypass();
  ~GateBypass();
  GateBypass(const GateBypass&) = delete;
  GateBypass& operator=(const GateBypass&) = delete;
};

/// Holds `gate` for one tracked call (RAII): check status() and return it when it is not
/// CUDA_SUCCESS. The process's hooks use CUSNAP_QUIESCE_GATE() (process.h).
class GateScope {
 public:
  explicit GateScope(QuiesceGate& gate) : gate_(gate), status_(gate.Enter()) {}
  ~GateScope() {
    if (status_ == CUDA_SUCCESS) gate_.Leave();
  }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
  CUresult status() const { return status_; }

 private:
  QuiesceGate& gate_;
  CUresult status_;
};

}  // namespace cusnap::shim
