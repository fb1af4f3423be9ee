// The lease watch (lifecycle.h, "The lease" and "The hold after a command"): one thread that
// wakes when a command's lease runs out, and, while the hold after a command is armed, ticks
// to see whether the process is due to be held again. It keeps the lease's timing; what to do
// then is its owner's (the lifecycle), called back on the watch's thread.
//
// No lease value can make the watch spin or wedge: a lease longer than kMaxLeaseMs is watched
// as that long (longer than any job lives), every conversion to ns saturates, and each wait is
// a positive duration of at most kLongestWaitNs, after which the watch looks again.
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>

#include "shim/hold/hold_again.h"

namespace cusnap::shim {

class LeaseWatch {
 public:
  /// What the watch calls back into, on its thread, with none of its locks held.
  class Owner {
   public:
    /// The lease ran out with no request since `generation` (ask StillRanOut under the lock
    /// that orders requests: one may have come since).
    virtual void LeaseRanOut(uint64_t generation) = 0;
    /// The hold after a command is due (ask TakeHold under that lock).
    virtual void HoldDue() = 0;

   protected:
    ~Owner() = default;
  };

  /// The longest lease watched as given (ms, about 31 years); a longer one is watched as
  /// this long.
  static constexpr uint64_t kMaxLeaseMs = 1'000'000'000'000;
  /// The longest one wait of the watch lasts (ns) before it looks at the clock again.
  static constexpr uint64_t kLongestWaitNs = 60'000'000'000;

  /// `lease_ms` as the watch keeps it: at most kMaxLeaseMs.
  static uint64_t WatchedLeaseMs(uint64_t lease_ms);
  /// When a lease of `lease_ms` given at `now_ns` runs out (MonotonicNs; saturating);
  /// 0 (no deadline) for lease_ms 0.
  static uint64_t DeadlineNs(uint64_t now_ns, uint64_t lease_ms);
  /// How long the watch waits at `now_ns` for `wake_ns`: wake_ns - now_ns, within
  /// [1, kLongestWaitNs] (ns); 1 when wake_ns has passed.
  static uint64_t WaitNs(uint64_t now_ns, uint64_t wake_ns);

  explicit LeaseWatch(Owner& owner);
  /// Stops the thread and waits for it (a callback in progress finishes first).
  ~LeaseWatch();
  LeaseWatch(const LeaseWatch&) = delete;
  LeaseWatch& operator=(const LeaseWatch&) = delete;

  /// A request started: the lease is suspended while it runs.
  void RequestStarted();
  /// A request ended: the lease is renewed with `lease_ms` (0: no lease from now on, the
  /// process is held until a request moves its state). Starts the thread at the first lease.
  void RequestEnded(uint64_t lease_ms);
  /// Arms (a release that says `held`) or disarms (activate) the hold after a command.
  void ArmHold(bool armed);

  /// From LeaseRanOut: true when no request came since `generation`.
  bool StillRanOut(uint64_t generation);
  /// From HoldDue: the ms the process ran with no command at work when the hold is still due
  /// (HoldAgainClock::Take); nullopt otherwise.
  std::optional<uint64_t> TakeHold();

  /// The lease now (ms, WatchedLeaseMs of the last one given; 0 before any).
  uint64_t lease_ms() const;
  /// When the lease runs out (MonotonicNs; 0: no lease running).
  uint64_t deadline_ns() const;
  /// How often the thread woke (tests: a watch never spins).
  uint64_t wakeups() const;

 private:
  void Start();  // mutex_ held
  void Run();

  Owner& owner_;
  mutable std::mutex mutex_;  // everything below
  std::condition_variable changed_;
  uint64_t lease_ms_ = 0;
  uint64_t deadline_ns_ = 0;  // MonotonicNs; 0: no lease running
  uint64_t generation_ = 0;   // bumped when a request starts and ends
  bool request_running_ = false;
  HoldAgainClock hold_;
  uint64_t wakeups_ = 0;
  bool stop_ = false;
  pthread_t thread_{};
  bool started_ = false;  // a failed start is retried at the next renewal or arming
};

}  // namespace cusnap::shim
