// The parts of the native driver loader that need no driver: CUSNAP_DRIVER's values and the
// kernel module version the CLI prints (found on the GPU machine, whose open kernel module
// line put "for" where the version was expected).
#include <gtest/gtest.h>

#include "coordinator/native/lazy_driver.h"
#include "coordinator/native/native_driver.h"
#include "coordinator_fakes.h"
#include "coordinator_printers.h"

namespace cusnap::coord {
namespace {

TEST(KernelModuleVersion, ProprietaryModuleLine) {
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                        "580.95.05  Tue Sep 30 11:56:25 UTC 2025"),
            "580.95.05");
}

TEST(KernelModuleVersion, OpenModuleLineNamesThePlatformFirst) {
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                        "580.159.04  Release Build  (dvs-builder@U16-I3-B17-4-3)"),
            "580.159.04");
}

TEST(KernelModuleVersion, NoVersionGivesEmpty) {
  EXPECT_EQ(KernelModuleVersionFromLine(""), "");
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: something else 1.2"), "");
  EXPECT_EQ(KernelModuleVersionFromLine("NVRM version: NVIDIA UNIX Kernel Module for x86_64"), "");
}

TEST(DriverChoice, ParsesEveryDocumentedValue) {
  EXPECT_EQ(*ParseDriverChoice(""), DriverChoice::kAuto);
  EXPECT_EQ(*ParseDriverChoice("auto"), DriverChoice::kAuto);
  EXPECT_EQ(*ParseDriverChoice("real"), DriverChoice::kReal);
  EXPECT_EQ(*ParseDriverChoice("sim"), DriverChoice::kSimulated);
  EXPECT_FALSE(ParseDriverChoice("simulated"));
  EXPECT_FALSE(ParseDriverChoice("gpu"));
}

// The lazy driver loads at its first use, once, and answers the load's error from then on.
TEST(LazyDriver, LoadsAtTheFirstUseOnceAndForwards) {
  testing::FakeJob job;
  int loads = 0;
  LazyDriver lazy([&]() -> Result<std::unique_ptr<CheckpointDriver>> {
    ++loads;
    auto driver = std::make_unique<testing::FakeDriver>(job);
    driver->states[42] = CU_PROCESS_STATE_RUNNING;
    return std::unique_ptr<CheckpointDriver>(std::move(driver));
  });
  EXPECT_EQ(loads, 0);
  EXPECT_FALSE(lazy.loaded());
  auto state = lazy.GetState(42);
  ASSERT_TRUE(state) << state.error().message;
  EXPECT_EQ(*state, CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(lazy.Describe(), "fake");
  EXPECT_TRUE(lazy.loaded());
  EXPECT_EQ(loads, 1);
}

TEST(LazyDriver, ALoadThatFailsIsEveryCallsErrorAndIsNotTriedAgain) {
  int loads = 0;
  LazyDriver lazy([&]() -> Result<std::unique_ptr<CheckpointDriver>> {
    ++loads;
    return Error{CUDA_ERROR_NO_DEVICE, "cannot load the CUDA driver: no device"};
  });
  const Status locked = lazy.Lock(7, 0);
  ASSERT_FALSE(locked);
  EXPECT_EQ(locked.error().code, CUDA_ERROR_NO_DEVICE);
  EXPECT_EQ(lazy.DeviceUuids().error().message, "cannot load the CUDA driver: no device");
  EXPECT_EQ(lazy.Describe(), "not loaded: cannot load the CUDA driver: no device");
  EXPECT_FALSE(lazy.simulated());
  EXPECT_FALSE(lazy.loaded());
  EXPECT_EQ(loads, 1);
}

}  // namespace
}  // namespace cusnap::coord
