// The lease watch (lease_watch.h).
#include "shim/lifecycle/lease_watch.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"
#include "common/saturating.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {

uint64_t LeaseWatch::WatchedLeaseMs(uint64_t lease_ms) { return std::min(lease_ms, kMaxLeaseMs); }

uint64_t LeaseWatch::DeadlineNs(uint64_t now_ns, uint64_t lease_ms) {
  if (lease_ms == 0) return 0;
  return SaturatingAdd(now_ns, SaturatingMsToNs(WatchedLeaseMs(lease_ms)));
}

uint64_t LeaseWatch::WaitNs(uint64_t now_ns, uint64_t wake_ns) {
  if (wake_ns <= now_ns) return 1;
  return std::min(wake_ns - now_ns, kLongestWaitNs);
}

LeaseWatch::LeaseWatch(Owner& owner) : owner_(owner) {}

LeaseWatch::~LeaseWatch() {
  bool started = false;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    started = started_;
    changed_.notify_all();
  }
  if (started) pthread_join(thread_, nullptr);
}

void LeaseWatch::RequestStarted() {
  std::lock_guard lock(mutex_);
  deadline_ns_ = 0;
  ++generation_;
  request_running_ = true;
  hold_.NoteActivity(MonotonicNs());
}

void LeaseWatch::RequestEnded(uint64_t lease_ms) {
  std::lock_guard lock(mutex_);
  ++generation_;
  request_running_ = false;
  const uint64_t now = MonotonicNs();
  hold_.NoteActivity(now);
  if (lease_ms == 0) return;
  lease_ms_ = WatchedLeaseMs(lease_ms);
  deadline_ns_ = DeadlineNs(now, lease_ms_);
  Start();
  changed_.notify_all();
}

void LeaseWatch::ArmHold(bool armed) {
  std::lock_guard lock(mutex_);
  hold_.Arm(armed, MonotonicNs());
  if (armed) Start();
  changed_.notify_all();
}

bool LeaseWatch::StillRanOut(uint64_t generation) {
  std::lock_guard lock(mutex_);
  return generation == generation_;
}

std::optional<uint64_t> LeaseWatch::TakeHold() {
  std::lock_guard lock(mutex_);
  std::optional<uint64_t> quiet_ns =
      hold_.Take(MonotonicNs(), SaturatingMsToNs(lease_ms_), request_running_);
  if (!quiet_ns) return std::nullopt;
  return *quiet_ns / 1'000'000;
}

uint64_t LeaseWatch::lease_ms() const {
  std::lock_guard lock(mutex_);
  return lease_ms_;
}

uint64_t LeaseWatch::deadline_ns() const {
  std::lock_guard lock(mutex_);
  return deadline_ns_;
}

uint64_t LeaseWatch::wakeups() const {
  std::lock_guard lock(mutex_);
  return wakeups_;
}

void LeaseWatch::Start() {
  if (started_) return;
  started_ = StartQuietThread(
      &thread_,
      [](void* self) -> void* {
        static_cast<LeaseWatch*>(self)->Run();
        return nullptr;
      },
      this);
  // Without the watch a lease never runs out: the job stays as the last command left it
  // (nothing is lost) but is not held again should the CLI vanish. Said, and retried at the
  // next renewal or arming.
  if (!started_) {
    CUSNAP_LOG_WARN("%s: no thread could be started to watch the lease; the job is not held "
                    "again on its own until one can",
                    ThisProcess().c_str());
  }
}

void LeaseWatch::Run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const uint64_t now = MonotonicNs();
    const uint64_t lease_ns = SaturatingMsToNs(lease_ms_);
    if (hold_.Due(now, lease_ns, request_running_)) {
      lock.unlock();
      owner_.HoldDue();
      lock.lock();
      continue;
    }
    if (deadline_ns_ != 0 && now >= deadline_ns_) {
      const uint64_t generation = generation_;
      deadline_ns_ = 0;
      lock.unlock();
      owner_.LeaseRanOut(generation);
      lock.lock();
      continue;
    }
    uint64_t wake = deadline_ns_;  // 0: no bound
    if (hold_.armed()) {
      const uint64_t tick = SaturatingAdd(now, HoldAgainClock::TickNs(lease_ns));
      wake = wake == 0 ? tick : std::min(wake, tick);
    }
    if (wake == 0) {
      hold_.NotePlannedWake(0);
      changed_.wait(lock);
    } else {
      const uint64_t wait_ns = WaitNs(now, wake);
      hold_.NotePlannedWake(now + wait_ns);
      changed_.wait_for(lock, std::chrono::nanoseconds(wait_ns));
    }
    ++wakeups_;
  }
}

}  // namespace cusnap::shim
