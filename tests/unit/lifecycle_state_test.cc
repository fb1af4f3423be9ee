// The lifecycle's phase machine (src/shim/lifecycle/lifecycle.h) over scripted steps: the whole
// cycle in order, refusals out of order that change nothing, failures that keep the state
// (a destructive one refuses resume and can run again), the lease that rolls back a shim
// whose command died before its commit, and the quiesce gate following the phases.
#include "shim/lifecycle/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/messages.h"
#include "printers.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;
using proto::Op;
using Phase = proto::ShimState;

// Steps that record what ran and fail when told to.
class ScriptedSteps : public LifecycleSteps {
 public:
  Op fail_on = Op::kExport;  // kExport: nothing fails
  std::vector<Op> ran;
  int discarded = 0;

  Status DetachMulticast() override { return Step(Op::kDetachMulticast); }
  Result<StepResult> Save(const std::string&) override {
    if (Status s = Step(Op::kSave); !s) return s.error();
    return StepResult{4u << 20, 11};
  }
  Status Release() override { return Step(Op::kRelease); }
  Result<StepResult> Reallocate() override {
    if (Status s = Step(Op::kReallocate); !s) return s.error();
    return StepResult{4u << 20, 44};
  }
  Status Import() override { return Step(Op::kImport); }
  Status MulticastCreate() override { return Step(Op::kMulticastCreate); }
  Status MulticastImport() override { return Step(Op::kMulticastImport); }
  Status MulticastJoin() override { return Step(Op::kMulticastJoin); }
  Status MulticastBind() override { return Step(Op::kMulticastBind); }
  void Discard() override { ++discarded; }

 private:
  Status Step(Op op) {
    ran.push_back(op);
    if (op == fail_on) return Error{CUDA_ERROR_OUT_OF_MEMORY, std::string("scripted failure in ") + OpName(op)};
    return Ok{};
  }
};

class LifecycleTest : public ::testing::Test {
 protected:
  static constexpr const char* kCheckpointId = "692c9a00-0123456789abcdef";
  // One request through the lifecycle: its reply, or its error's code and text.
  struct Answer {
    int status = 0;
    std::string text;
    proto::StepReply reply;
  };
  Answer Send(Op op, uint64_t drain_ms = 0, uint64_t lease_ms = 0) {
    proto::StepRequest request{op, drain_ms, op == Op::kSave ? kCheckpointId : ""};
    request.lease_ms = lease_ms;
    Result<proto::StepReply> reply = lifecycle.Handle(request);
    if (!reply.ok()) return Answer{reply.error().code, reply.error().message, {}};
    return Answer{0, "", *reply};
  }
  void ExpectOk(Op op, Phase after) {
    const Answer answer = Send(op);
    EXPECT_EQ(answer.status, 0) << OpName(op) << ": " << answer.text;
    EXPECT_EQ(answer.reply.state, after) << OpName(op);
    EXPECT_EQ(lifecycle.phase(), after);
  }
  void ExpectRefused(Op op, Phase stays) {
    const Answer reply = Send(op);
    EXPECT_EQ(reply.status, -1) << OpName(op);
    EXPECT_EQ(lifecycle.phase(), stays) << OpName(op);
    EXPECT_THAT(std::string(reply.text), HasSubstr("refused in phase"));
  }
  void RunCheckpointTo(Phase last) {
    const Op ops[] = {Op::kQuiesce, Op::kSave, Op::kDetachMulticast, Op::kRelease};
    const Phase phases[] = {Phase::kQuiesced, Phase::kSaved, Phase::kMulticastDetached,
                            Phase::kReleased};
    for (size_t i = 0; i < 4; ++i) {
      ExpectOk(ops[i], phases[i]);
      if (phases[i] == last) return;
    }
  }

  QuiesceGate gate;
  ScriptedSteps steps;
  Lifecycle lifecycle{steps, gate};
};

TEST_F(LifecycleTest, WholeCycleInOrder) {
  RunCheckpointTo(Phase::kReleased);
  EXPECT_TRUE(gate.closed());
  ExpectOk(Op::kReallocate, Phase::kReallocated);
  ExpectOk(Op::kImport, Phase::kImported);
  ExpectOk(Op::kMulticastCreate, Phase::kMulticastCreated);
  ExpectOk(Op::kMulticastImport, Phase::kMulticastImported);
  ExpectOk(Op::kMulticastJoin, Phase::kMulticastJoined);
  ExpectOk(Op::kMulticastBind, Phase::kRestored);
  // Restored, but the application waits for the coordinator's comparison.
  EXPECT_TRUE(gate.closed());
  ExpectRefused(Op::kQuiesce, Phase::kRestored);
  ExpectRefused(Op::kResume, Phase::kRestored);
  ExpectOk(Op::kActivate, Phase::kActive);
  EXPECT_FALSE(gate.closed());
  const std::vector<Op> expected = {Op::kSave,           Op::kDetachMulticast, Op::kRelease,
                                    Op::kReallocate,      Op::kImport,        Op::kMulticastCreate,
                                    Op::kMulticastImport, Op::kMulticastJoin, Op::kMulticastBind};
  EXPECT_EQ(steps.ran, expected);
  // A second cycle runs like the first.
  RunCheckpointTo(Phase::kQuiesced);
}

TEST_F(LifecycleTest, CarrierStepsReportBytesAndTimes) {
  RunCheckpointTo(Phase::kQuiesced);
  const Answer saved = Send(Op::kSave);
  ASSERT_EQ(saved.status, 0) << saved.text;
  EXPECT_EQ(saved.reply.bytes, 4u << 20);
  EXPECT_EQ(saved.reply.copy_ns, 11u);
}

TEST_F(LifecycleTest, OutOfOrderRequestsAreRefusedAndChangeNothing) {
  ExpectRefused(Op::kSave, Phase::kActive);
  ExpectRefused(Op::kRelease, Phase::kActive);
  ExpectRefused(Op::kReallocate, Phase::kActive);
  ExpectRefused(Op::kResume, Phase::kActive);
  EXPECT_FALSE(gate.closed());
  RunCheckpointTo(Phase::kQuiesced);
  ExpectRefused(Op::kQuiesce, Phase::kQuiesced);
  ExpectRefused(Op::kActivate, Phase::kQuiesced);
  ExpectRefused(Op::kImport, Phase::kQuiesced);
  ExpectRefused(Op::kDetachMulticast, Phase::kQuiesced);  // nothing is taken apart unsaved
  ExpectRefused(Op::kRelease, Phase::kQuiesced);
  ExpectOk(Op::kSave, Phase::kSaved);
  ExpectRefused(Op::kRelease, Phase::kSaved);
  ExpectOk(Op::kDetachMulticast, Phase::kMulticastDetached);
  ExpectOk(Op::kRelease, Phase::kReleased);
  ExpectRefused(Op::kRelease, Phase::kReleased);
  ExpectRefused(Op::kResume, Phase::kReleased);  // memory released: only a restore goes on
  ExpectRefused(Op::kImport, Phase::kReleased);
  ExpectOk(Op::kReallocate, Phase::kReallocated);
  ExpectRefused(Op::kExport, Phase::kReallocated);  // not a lifecycle step
  EXPECT_TRUE(lifecycle.failure().empty());
  // The refusals ran no step.
  EXPECT_EQ(steps.ran.size(), 4u);
}

TEST_F(LifecycleTest, ResumeUndoesACheckpointThatReleasedNothing) {
  RunCheckpointTo(Phase::kSaved);
  ExpectOk(Op::kResume, Phase::kActive);
  EXPECT_FALSE(gate.closed());
  EXPECT_EQ(steps.discarded, 1);
  RunCheckpointTo(Phase::kMulticastDetached);  // a detach that took nothing apart
  ExpectOk(Op::kResume, Phase::kActive);
  RunCheckpointTo(Phase::kQuiesced);
  ExpectOk(Op::kResume, Phase::kActive);
}

// The shim keeps the id its SAVE was given (IDENTIFY reports it) for as long as it holds
// that checkpoint's bytes: through release and restore, until activate or resume.
TEST_F(LifecycleTest, CheckpointIdIsKeptFromSaveUntilTheCheckpointEnds) {
  EXPECT_EQ(lifecycle.checkpoint_id(), "");
  RunCheckpointTo(Phase::kSaved);
  EXPECT_EQ(lifecycle.checkpoint_id(), kCheckpointId);
  ExpectOk(Op::kResume, Phase::kActive);
  EXPECT_EQ(lifecycle.checkpoint_id(), "");
  RunCheckpointTo(Phase::kReleased);
  EXPECT_EQ(lifecycle.checkpoint_id(), kCheckpointId);
  for (Op op : {Op::kReallocate, Op::kImport, Op::kMulticastCreate, Op::kMulticastImport,
                Op::kMulticastJoin, Op::kMulticastBind}) {
    ASSERT_EQ(Send(op).status, 0) << OpName(op);
  }
  EXPECT_EQ(lifecycle.checkpoint_id(), kCheckpointId);
  ExpectOk(Op::kActivate, Phase::kActive);
  EXPECT_EQ(lifecycle.checkpoint_id(), "");
}

TEST_F(LifecycleTest, FailedSaveIsNotStickyAndTheJobCanResume) {
  steps.fail_on = Op::kSave;
  RunCheckpointTo(Phase::kQuiesced);
  const Answer reply = Send(Op::kSave);
  EXPECT_EQ(reply.status, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_THAT(std::string(reply.text), HasSubstr("scripted failure in SAVE"));
  EXPECT_EQ(lifecycle.phase(), Phase::kQuiesced);
  EXPECT_EQ(lifecycle.checkpoint_id(), "");
  EXPECT_TRUE(lifecycle.failure().empty());
  EXPECT_EQ(steps.discarded, 1);
  ExpectOk(Op::kResume, Phase::kActive);
  EXPECT_FALSE(gate.closed());
}

// A destructive step that fails keeps its state (the step undid its partial work or skips
// what it did), says why (status shows it), keeps application calls waiting, refuses to
// resume, and succeeds when it is run again; the restore then goes on to ACTIVE.
TEST_F(LifecycleTest, FailedDestructiveStepKeepsItsStateAndCanRunAgain) {
  steps.fail_on = Op::kRelease;
  RunCheckpointTo(Phase::kMulticastDetached);
  const Answer reply = Send(Op::kRelease);
  EXPECT_EQ(reply.status, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(lifecycle.phase(), Phase::kMulticastDetached);
  EXPECT_THAT(lifecycle.failure(), HasSubstr("scripted failure in RELEASE"));
  EXPECT_THAT(lifecycle.failure(), HasSubstr("the step can be run again ('cusnap recover')"));
  EXPECT_THAT(lifecycle.failure(), HasSubstr("pid "));
  EXPECT_TRUE(gate.closed());
  const Answer resume = Send(Op::kResume);
  EXPECT_EQ(resume.status, -1);
  EXPECT_THAT(resume.text, HasSubstr("run 'cusnap recover' to finish it"));
  EXPECT_EQ(lifecycle.phase(), Phase::kMulticastDetached);
  steps.fail_on = Op::kExport;  // the cause went away
  ExpectOk(Op::kRelease, Phase::kReleased);
  EXPECT_TRUE(lifecycle.failure().empty());
  for (Op op : {Op::kReallocate, Op::kImport, Op::kMulticastCreate, Op::kMulticastImport,
                Op::kMulticastJoin, Op::kMulticastBind}) {
    ASSERT_EQ(Send(op).status, 0) << OpName(op);
  }
  ExpectOk(Op::kActivate, Phase::kActive);
  EXPECT_FALSE(gate.closed());
}

// The lease: a command that stops sending (killed) while the shim is QUIESCED or SAVED before
// its commit leaves the shim to roll back by itself: ACTIVE, gate open, bytes discarded, and
// failure() says why. Requests renew it (kRenew too).
TEST_F(LifecycleTest, LeaseThatRunsOutRollsBackBeforeTheCommit) {
  ASSERT_EQ(Send(Op::kQuiesce, 0, 200).status, 0);
  ASSERT_EQ(Send(Op::kSave, 0, 200).status, 0);
  for (int i = 0; i < 4; ++i) {  // renewed for longer than one lease
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(Send(Op::kRenew, 0, 200).status, 0);
    ASSERT_EQ(lifecycle.phase(), Phase::kSaved);
  }
  for (int i = 0; i < 200 && lifecycle.phase() != Phase::kActive; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
  EXPECT_FALSE(gate.closed());
  EXPECT_EQ(steps.discarded, 1);
  EXPECT_EQ(lifecycle.checkpoint_id(), "");
  EXPECT_THAT(lifecycle.failure(), HasSubstr("its lease expired) in phase SAVED, before anything "
                                             "was changed: rolled back by itself to ACTIVE"));
  // The next checkpoint runs as usual.
  ExpectOk(Op::kQuiesce, Phase::kQuiesced);
}

// After kCommit (the coordinator's point of no return) the lease no longer rolls back:
// application calls wait until the command, or 'cusnap recover', moves the shim on.
TEST_F(LifecycleTest, LeaseDoesNotRollBackAfterTheCommit) {
  ASSERT_EQ(Send(Op::kQuiesce, 0, 100).status, 0);
  ASSERT_EQ(Send(Op::kSave, 0, 100).status, 0);
  ASSERT_EQ(Send(Op::kCommit, 0, 100).status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(lifecycle.phase(), Phase::kSaved);
  EXPECT_TRUE(gate.closed());
  EXPECT_EQ(steps.discarded, 0);
  ExpectOk(Op::kDetachMulticast, Phase::kMulticastDetached);
}

TEST_F(LifecycleTest, QuiesceThatCannotDrainLeavesTheJobRunning) {
  ASSERT_EQ(gate.Enter(), CUDA_SUCCESS);  // an application call that does not return
  const Answer reply = Send(Op::kQuiesce, /*drain ms*/ 20);
  EXPECT_EQ(reply.status, CUDA_ERROR_NOT_READY);
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
  EXPECT_FALSE(gate.closed());
  gate.Leave();
  ExpectOk(Op::kQuiesce, Phase::kQuiesced);
}

TEST_F(LifecycleTest, ApplicationCallWaitsWhileQuiescedAndProceedsAfterResume) {
  RunCheckpointTo(Phase::kQuiesced);
  std::future<CUresult> call = std::async(std::launch::async, [&] {
    const CUresult entered = gate.Enter();
    if (entered == CUDA_SUCCESS) gate.Leave();
    return entered;
  });
  while (gate.waiting() != 1) std::this_thread::yield();
  EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  ExpectOk(Op::kResume, Phase::kActive);
  EXPECT_EQ(call.get(), CUDA_SUCCESS);
}

TEST_F(LifecycleTest, ApplicationCallWaitsThroughRestoreUntilActivate) {
  RunCheckpointTo(Phase::kReleased);
  std::future<CUresult> call = std::async(std::launch::async, [&] {
    const CUresult entered = gate.Enter();
    if (entered == CUDA_SUCCESS) gate.Leave();
    return entered;
  });
  while (gate.waiting() != 1) std::this_thread::yield();
  for (Op op : {Op::kReallocate, Op::kImport, Op::kMulticastCreate, Op::kMulticastImport,
                Op::kMulticastJoin, Op::kMulticastBind}) {
    ASSERT_EQ(Send(op).status, 0) << OpName(op);
  }
  EXPECT_EQ(call.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  ExpectOk(Op::kActivate, Phase::kActive);
  EXPECT_EQ(call.get(), CUDA_SUCCESS);
}

}  // namespace
}  // namespace cusnap::shim
