// The lifecycle's own threads in a process where none can be started (without_threads.h):
// the drain before save is refused, named, and the job goes on; a command's lease is taken
// without its watcher. Neither aborts the application.
#include <gtest/gtest.h>

#include <string>

#include "common/messages.h"
#include "shim/lifecycle/drain.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/quiesce.h"
#include "without_threads.h"

namespace cusnap::shim {
namespace {

using proto::Op;

// A driver with no device and no work: every call the drain makes succeeds.
DriverApi IdleDriver() {
  DriverApi api{};
  api.cuCtxPushCurrent_v2 = [](CUcontext) { return CUDA_SUCCESS; };
  api.cuCtxPopCurrent_v2 = [](CUcontext*) { return CUDA_SUCCESS; };
  api.cuCtxSynchronize = [] { return CUDA_SUCCESS; };
  api.cuCtxGetDevice = [](CUdevice* device) {
    *device = 0;
    return CUDA_SUCCESS;
  };
  api.cuDeviceGetCount = [](int* count) {
    *count = 0;
    return CUDA_SUCCESS;
  };
  return api;
}

// Steps that do nothing: the test is about the lifecycle's threads, not its steps.
class NoSteps : public LifecycleSteps {
 public:
  Result<StepResult> Save(const std::string&) override { return StepResult{}; }
  Status Release() override { return Ok{}; }
  Result<StepResult> Reallocate() override { return StepResult{}; }
  Status Import() override { return Ok{}; }
  Status DrainDeviceWork(int64_t) override { return Ok{}; }
};

class ShimThreads : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "RLIMIT_AS cannot be lowered under AddressSanitizer (run on the release preset)";
#endif
  }
};

TEST_F(ShimThreads, ADrainThatCannotStartItsThreadIsRefusedNamed) {
  const DriverApi api = IdleDriver();
  DeviceWork work;
  ASSERT_TRUE(work.Drain(api, 1000).ok()) << "with threads the idle drain succeeds";
  const int code = test::WithoutThreads([&] {
    const Status drained = work.Drain(api, 1000);
    if (drained.ok()) return 1;
    if (drained.error().code != CUDA_ERROR_NOT_READY) return 2;
    const std::string expected = "pid " + std::to_string(getpid()) +
                                 ": no thread could be started to synchronise the devices "
                                 "before save; not quiesced, the job goes on";
    return drained.error().message == expected ? 0 : 3;
  });
  EXPECT_EQ(code, 0);
}

TEST_F(ShimThreads, ALeaseWithoutItsWatcherIsTakenAndTheNextRequestIsServed) {
  const int code = test::WithoutThreads([] {
    QuiesceGate gate;
    NoSteps steps;
    Lifecycle lifecycle(steps, gate);
    // The command's lease (60 s) would start the watcher; none can start.
    Result<proto::StepReply> quiesced =
        lifecycle.Handle(proto::StepRequest{Op::kQuiesce, 250, "", 60'000});
    if (!quiesced.ok() || quiesced->state != proto::ShimState::kQuiesced) return 1;
    Result<proto::StepReply> resumed = lifecycle.Handle(proto::StepRequest{Op::kResume, 0, "", 60'000});
    if (!resumed.ok() || resumed->state != proto::ShimState::kActive || gate.closed()) return 2;
    return 0;  // and the destructor joins no thread that never started
  });
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace cusnap::shim
