// The lifecycle's rules for multicast detach (src/shim/lifecycle/lifecycle.h): it runs after
// SAVE only; a DETACH_MULTICAST that failed without destroying anything (it undid its own
// work) leaves the shim SAVED and resumable; one that failed after a multicast object was
// released keeps its state (only rolling forward finishes); a checkpoint whose detach took
// a team apart can no longer resume; and a team taken apart in an earlier, finished cycle does not stop this one's
// resume before its detach.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

#include "common/messages.h"
#include "printers.h"
#include "shim/lifecycle/lifecycle.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;
using proto::Op;
using Phase = proto::ShimState;

class DetachSteps : public LifecycleSteps {
 public:
  bool fail_detach = false;
  bool destroy = false;  // what the detach leaves taken apart
  bool fail_save = false;

  Status DetachMulticast() override {
    destroyed_ = destroy;
    if (fail_detach) return Error{999, "pid " + std::to_string(getpid()) + ": cuMulticastUnbind failed with CUDA_ERROR_UNKNOWN (999) for multicast object 1 of pid 1"};
    return Ok{};
  }
  bool MulticastDestroyed() const override { return destroyed_; }
  Result<StepResult> Save(const std::string&) override {
    if (fail_save) return Error{999, "save failed"};
    return StepResult{};
  }
  Status Release() override { return Ok{}; }
  Result<StepResult> Reallocate() override { return StepResult{}; }
  Status Import() override { return Ok{}; }

 private:
  bool destroyed_ = false;
};

std::string ThisProcessForTest() { return "pid " + std::to_string(getpid()); }

class MulticastLifecycleTest : public ::testing::Test {
 protected:
  // The request's error: code 0 and no message when it succeeded.
  Error Send(Op op) {
    Result<proto::StepReply> reply = lifecycle.Handle(proto::StepRequest{op, 0, ""});
    return reply.ok() ? Error{0, ""} : reply.error();
  }
  DetachSteps steps;
  QuiesceGate gate;
  Lifecycle lifecycle{steps, gate};
};

TEST_F(MulticastLifecycleTest, DetachFailureThatDestroyedNothingCanResume) {
  steps.fail_detach = true;
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  ASSERT_EQ(Send(Op::kSave).code, 0);
  const Error reply = Send(Op::kDetachMulticast);
  EXPECT_EQ(reply.code, 999);
  EXPECT_EQ(lifecycle.phase(), Phase::kSaved);
  EXPECT_THAT(reply.message, HasSubstr("cuMulticastUnbind failed with CUDA_ERROR_UNKNOWN (999)"));
  EXPECT_EQ(Send(Op::kResume).code, 0);
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
  EXPECT_FALSE(gate.closed());
}

// A detach that failed after it released a team keeps SAVED (only a roll forward finishes:
// resume is refused), says why, and keeps application calls waiting.
TEST_F(MulticastLifecycleTest, DetachFailureAfterAReleaseOnlyRollsForward) {
  steps.fail_detach = true;
  steps.destroy = true;
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  ASSERT_EQ(Send(Op::kSave).code, 0);
  const Error reply = Send(Op::kDetachMulticast);
  EXPECT_EQ(reply.code, 999);
  EXPECT_EQ(lifecycle.phase(), Phase::kSaved);
  // The process is said once, then the step and the driver's answer.
  EXPECT_EQ(lifecycle.failure(),
            ThisProcessForTest() + ": DETACH_MULTICAST failed; the shim stays SAVED and the step "
            "can be run again ('cusnap recover'): cuMulticastUnbind failed with "
            "CUDA_ERROR_UNKNOWN (999) for multicast object 1 of pid 1");
  EXPECT_EQ(Send(Op::kResume).code, -1);
  EXPECT_TRUE(gate.closed());
}

TEST_F(MulticastLifecycleTest, ADetachedTeamRefusesResume) {
  steps.destroy = true;
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  ASSERT_EQ(Send(Op::kSave).code, 0);
  ASSERT_EQ(Send(Op::kDetachMulticast).code, 0);
  const Error resume = Send(Op::kResume);
  EXPECT_EQ(resume.code, -1);
  EXPECT_THAT(resume.message, HasSubstr("no multicast team"));
  EXPECT_EQ(lifecycle.phase(), Phase::kMulticastDetached);
}

TEST_F(MulticastLifecycleTest, DetachNeedsASavedCheckpoint) {
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  const Error reply = Send(Op::kDetachMulticast);
  EXPECT_EQ(reply.code, -1);
  EXPECT_THAT(reply.message, HasSubstr("it needs phase SAVED"));
  EXPECT_EQ(lifecycle.phase(), Phase::kQuiesced);
}

TEST_F(MulticastLifecycleTest, ADetachThatFoundNoTeamStillResumes) {
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  ASSERT_EQ(Send(Op::kSave).code, 0);
  ASSERT_EQ(Send(Op::kDetachMulticast).code, 0);
  EXPECT_EQ(Send(Op::kResume).code, 0);
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
}

// The last cycle took its team apart (and a restore rebuilt it): this cycle's SAVE fails, or
// its state file cannot be written, before any detach: the shim still resumes.
TEST_F(MulticastLifecycleTest, AnEarlierCyclesDetachDoesNotStopResumeBeforeThisDetach) {
  steps.destroy = true;
  for (Op op : {Op::kQuiesce, Op::kSave, Op::kDetachMulticast, Op::kRelease, Op::kReallocate,
                Op::kImport, Op::kMulticastCreate, Op::kMulticastImport, Op::kMulticastJoin,
                Op::kMulticastBind, Op::kActivate}) {
    ASSERT_EQ(Send(op).code, 0) << proto::OpName(op);
  }
  ASSERT_TRUE(steps.MulticastDestroyed());
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  ASSERT_EQ(Send(Op::kSave).code, 0);
  EXPECT_EQ(Send(Op::kResume).code, 0);
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
  steps.fail_save = true;
  ASSERT_EQ(Send(Op::kQuiesce).code, 0);
  EXPECT_EQ(Send(Op::kSave).code, 999);
  EXPECT_EQ(lifecycle.phase(), Phase::kQuiesced);
  EXPECT_EQ(Send(Op::kResume).code, 0);
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
}

}  // namespace
}  // namespace cusnap::shim
