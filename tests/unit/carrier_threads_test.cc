// The carrier's own threads in a process where none can be started (without_threads.h): the
// pinner registers inline, copies still carry every byte, and eager growth leaves the
// provisioning to the checkpoint. No abort in the application.
#include <gtest/gtest.h>

#include <string>

#include "carrier_fixture.h"
#include "without_threads.h"

namespace cusnap::shim {
namespace {

class CarrierWithoutThreads : public HostCarrierTest {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "RLIMIT_AS cannot be lowered under AddressSanitizer (run on the release preset)";
#endif
    HostCarrierTest::SetUp();
  }
};

// Pipelined pinning registers and unregisters each cycle on the pinner's threads; the arena
// is grown by a first cycle with threads (growing needs address space the child lacks).
TEST_F(CarrierWithoutThreads, ACycleWithoutThreadsPinsInlineAndCarriesEveryByte) {
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto pattern = Pattern(a.size, 0x1234);
  Write(a, pattern);
  HostCarrier carrier(api, RegisteringPerCycle());
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_TRUE(carrier.Save(slots).ok());
  ASSERT_TRUE(carrier.Load(slots).ok());
  std::string message;  // the failed step's error
  const int code = test::WithoutThreads([&] {
    Result<CarrierTransfer> saved = carrier.Save(slots);
    if (!saved.ok()) {
      message = saved.error().message;
      return 1;
    }
    if (!SameBytes(carrier.saved(0), pattern)) return 5;
    Scribble(a);
    Result<CarrierTransfer> loaded = carrier.Load(slots);
    if (!loaded.ok()) {
      message = loaded.error().message;
      return 2;
    }
    if (Read(a) != pattern) return 3;
    // Registered only while bytes moved, as with the pinner's threads.
    return HostFlagsResult(carrier, a) == CUDA_ERROR_INVALID_VALUE ? 0 : 4;
  });
  EXPECT_EQ(code, 0) << message;
}

TEST_F(CarrierWithoutThreads, EagerGrowthWithoutItsThreadLeavesTheArenaToTheCheckpoint) {
  const int code = test::WithoutThreads([&] {
    HostCarrier eager(api, CarrierMode::kEager);
    eager.Anticipate(8 * kMiB);
    return eager.capacity() == 0 ? 0 : 1;  // and the destructor joins no thread
  });
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace cusnap::shim
