// kQuiesce drains the devices after closing the gate (lifecycle.cc, lifecycle/drain.h): a drain
// that fails (work still in flight, a stream capture open) refuses the quiesce with its error,
// the phase stays ACTIVE and the gate is open again; a drain that succeeds leaves the process
// QUIESCED behind a closed gate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/messages.h"
#include "printers.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/quiesce.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;
using proto::Op;
using Phase = proto::ShimState;

// Steps whose only behaviour is the drain's answer; records the deadline it was given.
class DrainSteps : public LifecycleSteps {
 public:
  bool drain_fails = true;
  int64_t deadline_ms = -1;
  bool gate_closed_during_drain = false;
  QuiesceGate* gate = nullptr;

  Result<StepResult> Save(const std::string&) override { return StepResult{}; }
  Status Release() override { return Ok{}; }
  Result<StepResult> Reallocate() override { return StepResult{}; }
  Status Import() override { return Ok{}; }
  Status DrainDeviceWork(int64_t deadline) override {
    deadline_ms = deadline;
    gate_closed_during_drain = gate->closed();
    if (drain_fails) {
      return Error{CUDA_ERROR_NOT_READY, "pid 1: device 0 still has work in flight after 250 ms"};
    }
    return Ok{};
  }
};

TEST(LifecycleDrain, AFailedDrainRefusesTheQuiesceAndReopensTheGate) {
  QuiesceGate gate;
  DrainSteps steps;
  steps.gate = &gate;
  Lifecycle lifecycle(steps, gate);
  Result<proto::StepReply> refused = lifecycle.Handle(proto::StepRequest{Op::kQuiesce, 250, ""});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, CUDA_ERROR_NOT_READY);
  EXPECT_THAT(refused.error().message, HasSubstr("device 0 still has work in flight after 250 ms"));
  EXPECT_EQ(steps.deadline_ms, 250);
  EXPECT_TRUE(steps.gate_closed_during_drain) << "the drain runs behind the closed gate";
  EXPECT_EQ(lifecycle.phase(), Phase::kActive);
  EXPECT_FALSE(gate.closed());

  steps.drain_fails = false;
  Result<proto::StepReply> quiesced = lifecycle.Handle(proto::StepRequest{Op::kQuiesce, 250, ""});
  ASSERT_TRUE(quiesced.ok()) << quiesced.error().message;
  EXPECT_EQ(quiesced->state, Phase::kQuiesced);
  EXPECT_TRUE(gate.closed());
  ASSERT_TRUE(lifecycle.Handle(proto::StepRequest{Op::kResume, 0, ""}).ok());
  EXPECT_FALSE(gate.closed());
}

}  // namespace
}  // namespace cusnap::shim
