// The lease watch (src/shim/lifecycle/lease_watch.h) at and past the range of a lease: 0, 1,
// the longest watched, one more, INT64_MAX, UINT64_MAX (from CUSNAP_LEASE_MS or a step
// request's lease field). No value may make the deadline wrap, a wait negative or zero, or
// the hold fall due at once: the watch's thread sleeps, and a short lease still runs out.
#include "shim/lifecycle/lease_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/messages.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/quiesce.h"
#include "printers.h"

namespace cusnap::shim {
namespace {

constexpr uint64_t kMax = LeaseWatch::kMaxLeaseMs;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();
// Past the range: the longest watched plus one, the signed and unsigned 64-bit limits, and
// the value that made the nanoseconds of a wait overflow (10^13 ms).
const std::vector<uint64_t> kPastTheRange = {kMax + 1, 10'000'000'000'000, kInt64Max, kUint64Max};

TEST(LeaseWatchDeadline, AtTheRangeIsTheLeaseInNanoseconds) {
  const uint64_t now = 5'000'000'000'000;  // about 83 minutes after boot
  EXPECT_EQ(LeaseWatch::DeadlineNs(now, 0), 0u) << "lease 0: no deadline";
  EXPECT_EQ(LeaseWatch::DeadlineNs(now, 1), now + 1'000'000);
  EXPECT_EQ(LeaseWatch::DeadlineNs(now, kMax), now + kMax * 1'000'000);
  EXPECT_EQ(LeaseWatch::WatchedLeaseMs(kMax), kMax);
}

TEST(LeaseWatchDeadline, PastTheRangeIsTheLongestWatched) {
  const uint64_t now = 5'000'000'000'000;
  for (const uint64_t lease_ms : kPastTheRange) {
    SCOPED_TRACE(lease_ms);
    EXPECT_EQ(LeaseWatch::WatchedLeaseMs(lease_ms), kMax);
    EXPECT_EQ(LeaseWatch::DeadlineNs(now, lease_ms), now + kMax * 1'000'000);
  }
}

TEST(LeaseWatchDeadline, NeverWrapsBelowNow) {
  const uint64_t late = kUint64Max - 5;
  for (const uint64_t lease_ms : {uint64_t{1}, kMax, kUint64Max}) {
    SCOPED_TRACE(lease_ms);
    EXPECT_EQ(LeaseWatch::DeadlineNs(late, lease_ms), kUint64Max);
  }
}

// Every wait is a positive duration that a signed 64-bit nanosecond count holds, at most
// kLongestWaitNs: the watch sleeps, then looks at the clock again.
TEST(LeaseWatchWait, IsPositiveAndBoundedForEveryLease) {
  const uint64_t now = 5'000'000'000'000;
  EXPECT_EQ(LeaseWatch::WaitNs(now, LeaseWatch::DeadlineNs(now, 1)), 1'000'000u);
  std::vector<uint64_t> leases = {1, kMax};
  leases.insert(leases.end(), kPastTheRange.begin(), kPastTheRange.end());
  for (const uint64_t lease_ms : leases) {
    SCOPED_TRACE(lease_ms);
    const uint64_t wait = LeaseWatch::WaitNs(now, LeaseWatch::DeadlineNs(now, lease_ms));
    EXPECT_GE(wait, 1u);
    EXPECT_LE(wait, LeaseWatch::kLongestWaitNs);
    EXPECT_GT(std::chrono::nanoseconds(static_cast<int64_t>(wait)).count(), 0);
  }
  EXPECT_EQ(LeaseWatch::WaitNs(now, now), 1u) << "a deadline reached waits the least, never 0";
  EXPECT_EQ(LeaseWatch::WaitNs(now, now - 1), 1u);
}

// The hold's grace is the lease: a lease past the range must not wrap the grace into the
// past and hold the process at once.
TEST(LeaseWatchHold, AGraceOfAnyLeaseIsNotDueAtOnce) {
  const uint64_t now = 5'000'000'000'000;
  for (const uint64_t lease_ns : {uint64_t{1'000'000}, kMax * 1'000'000, kUint64Max}) {
    SCOPED_TRACE(lease_ns);
    HoldAgainClock clock;
    clock.Arm(true, now);
    EXPECT_FALSE(clock.Due(now + 1, lease_ns, false));
    EXPECT_FALSE(clock.Take(now + 1, lease_ns, false).has_value());
    EXPECT_GE(HoldAgainClock::GapNs(lease_ns), 50'000'000u);
    EXPECT_LE(HoldAgainClock::GapNs(lease_ns), 1'000'000'000u);
  }
  HoldAgainClock clock;
  clock.Arm(true, now);
  EXPECT_FALSE(clock.Due(now + 999'999, 1'000'000, false));
  EXPECT_TRUE(clock.Due(now + 1'000'000, 1'000'000, false)) << "a 1 ms grace is due after 1 ms";
  EXPECT_FALSE(clock.Due(now + 1'000'000, 1'000'000, true)) << "never while a request runs";
}

// An owner that records the watch's calls (HoldDue takes the hold, as the lifecycle does).
class RecordingOwner : public LeaseWatch::Owner {
 public:
  void LeaseRanOut(uint64_t) override {
    std::lock_guard lock(mutex_);
    ++ran_out_;
    changed_.notify_all();
  }
  void HoldDue() override {
    std::lock_guard lock(mutex_);
    ++holds_;
    if (watch_ != nullptr) (void)watch_->TakeHold();
  }
  // Waits (at most 10 s) for the lease to run out; true when it did.
  bool WaitForRanOut() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return ran_out_ > 0; });
  }
  int ran_out() {
    std::lock_guard lock(mutex_);
    return ran_out_;
  }
  int holds() {
    std::lock_guard lock(mutex_);
    return holds_;
  }
  LeaseWatch* watch_ = nullptr;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int ran_out_ = 0;
  int holds_ = 0;
};

TEST(LeaseWatchThread, AShortLeaseRunsOut) {
  RecordingOwner owner;
  LeaseWatch watch(owner);
  watch.RequestStarted();
  watch.RequestEnded(1);
  EXPECT_TRUE(owner.WaitForRanOut());
  EXPECT_EQ(watch.deadline_ns(), 0u) << "the deadline is spent once it ran out";
}

// A lease past the range is the longest watched; the thread sleeps (a wait with a negative
// duration would return at once, over and over: millions of wakeups in these 200 ms).
TEST(LeaseWatchThread, ALeasePastTheRangeSleepsWithoutSpinning) {
  for (const uint64_t lease_ms : kPastTheRange) {
    SCOPED_TRACE(lease_ms);
    RecordingOwner owner;
    LeaseWatch watch(owner);
    owner.watch_ = &watch;
    const uint64_t before = MonotonicNs();
    watch.RequestStarted();
    watch.RequestEnded(lease_ms);
    watch.ArmHold(true);  // ticks every half second at most
    EXPECT_EQ(watch.lease_ms(), kMax);
    EXPECT_GE(watch.deadline_ns(), before + kMax * 1'000'000);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t settled = watch.wakeups();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_LE(watch.wakeups() - settled, 1u);
    EXPECT_EQ(owner.ran_out(), 0);
    EXPECT_EQ(owner.holds(), 0) << "the grace of such a lease is not over at once";
  }
}

// Over the lifecycle: a step request with such a lease is served, and the next one too.
class NoSteps : public LifecycleSteps {};

TEST(LeaseWatchThread, ALifecycleWithALeasePastTheRangeServesTheNextRequest) {
  for (const uint64_t lease_ms : kPastTheRange) {
    SCOPED_TRACE(lease_ms);
    QuiesceGate gate;
    NoSteps steps;
    Lifecycle lifecycle(steps, gate);
    Result<proto::StepReply> quiesced =
        lifecycle.Handle(proto::StepRequest{proto::Op::kQuiesce, 250, "", lease_ms});
    ASSERT_TRUE(quiesced.ok()) << quiesced.error().message;
    EXPECT_EQ(quiesced->state, proto::ShimState::kQuiesced);
    Result<proto::StepReply> resumed =
        lifecycle.Handle(proto::StepRequest{proto::Op::kResume, 0, "", lease_ms});
    ASSERT_TRUE(resumed.ok()) << resumed.error().message;
    EXPECT_EQ(resumed->state, proto::ShimState::kActive);
  }
}

}  // namespace
}  // namespace cusnap::shim
