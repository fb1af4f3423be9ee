// The quiesce gate (src/shim/lifecycle/quiesce.h): application calls to tracked entry points wait
// while the shim is quiesced, proceed when it opens, fail after a bound; Close waits for
// calls in flight. Threads hand over through the gate's own counters (waiting(),
// in_flight(), closed()), never through sleeps.
#include "shim/lifecycle/quiesce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;

// Spins (yielding) until `done` holds; the surrounding test's timeout bounds it.
template <typename Predicate>
void WaitUntil(Predicate done) {
  while (!done()) std::this_thread::yield();
}

TEST(QuiesceGate, OpenGateAdmitsAndCounts) {
  QuiesceGate gate;
  EXPECT_FALSE(gate.closed());
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);
  EXPECT_EQ(gate.in_flight(), 1u);
  gate.Leave();
  EXPECT_EQ(gate.in_flight(), 0u);
}

TEST(QuiesceGate, CallWaitsWhileClosedAndProceedsWhenOpened) {
  QuiesceGate gate;
  ASSERT_TRUE(gate.Close(1000).ok());
  std::future<CUresult> call = std::async(std::launch::async, [&] {
    const CUresult entered = gate.Enter();
    if (entered == CUDA_SUCCESS) gate.Leave();
    return entered;
  });
  WaitUntil([&] { return gate.waiting() == 1; });
  EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  gate.Open();
  EXPECT_EQ(call.get(), CUDA_SUCCESS);
  EXPECT_EQ(gate.waiting(), 0u);
  EXPECT_EQ(gate.in_flight(), 0u);
}

TEST(QuiesceGate, WaitIsBoundedAndFailsNotReady) {
  QuiesceGate gate;
  gate.set_wait_ms(20);
  ASSERT_TRUE(gate.Close(1000).ok());
  EXPECT_EQ(gate.Enter(), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(gate.in_flight(), 0u);
  EXPECT_TRUE(gate.closed());
}

TEST(QuiesceGate, CloseWaitsForTheCallInFlight) {
  QuiesceGate gate;
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);  // an application call in progress
  std::future<Status> close = std::async(std::launch::async, [&] { return gate.Close(60'000); });
  WaitUntil([&] { return gate.closed(); });
  // The call is still in flight, so Close cannot have returned.
  EXPECT_EQ(close.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  gate.Leave();
  EXPECT_TRUE(close.get().ok());
  EXPECT_TRUE(gate.closed());
}

TEST(QuiesceGate, CloseGivesUpAfterItsBoundAndReopens) {
  QuiesceGate gate;
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);
  const Status closed = gate.Close(20);
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.error().code, CUDA_ERROR_NOT_READY);
  EXPECT_THAT(closed.error().message, HasSubstr("1 tracked driver call(s) still in flight"));
  EXPECT_FALSE(gate.closed());
  gate.Leave();
}

TEST(QuiesceGate, NestedCallOnOneThreadPassesAClosingGate) {
  QuiesceGate gate;
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);
  std::future<Status> close = std::async(std::launch::async, [&] { return gate.Close(60'000); });
  WaitUntil([&] { return gate.closed(); });
  // A hook calling another hook must not wait for its own outer call to leave.
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);
  gate.Leave();
  EXPECT_EQ(gate.in_flight(), 1u);
  gate.Leave();
  EXPECT_TRUE(close.get().ok());
}

TEST(QuiesceGate, BypassLetsTheControlThreadThrough) {
  QuiesceGate gate;
  gate.set_wait_ms(20);
  ASSERT_TRUE(gate.Close(1000).ok());
  {
    GateBypass bypass;
    ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);
    EXPECT_EQ(gate.in_flight(), 0u);  // not counted: a later Close never waits for it
    gate.Leave();
  }
  EXPECT_EQ(gate.Enter(), CUDA_ERROR_NOT_READY);
}

TEST(QuiesceGate, FailedGateFailsAtOnceAndWakesWaiters) {
  QuiesceGate gate;
  ASSERT_TRUE(gate.Close(1000).ok());
  std::future<CUresult> call = std::async(std::launch::async, [&] { return gate.Enter(); });
  WaitUntil([&] { return gate.waiting() == 1; });
  gate.Fail();
  EXPECT_EQ(call.get(), CUDA_ERROR_NOT_READY);
  gate.set_wait_ms(QuiesceGate::kWaitForever);  // no wait: a FAILED gate answers at once
  EXPECT_EQ(gate.Enter(), CUDA_ERROR_NOT_READY);
}

}  // namespace
}  // namespace cusnap::shim
