// The host carrier (src/shim/carrier/carrier.h) on the simulated driver, in the test process: bytes
// of device and HOST_NUMA allocations on two devices go to the arena and back into fresh
// allocations at the same VAs; the arena is reused and only grows; it is registered with the
// driver only while bytes move; eager mode provides it in the background.
#include "shim/carrier/carrier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "carrier_fixture.h"
#include "carrier_sim_driver.h"
#include "shim_printers.h"
#include "simcuda/introspection.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;

TEST_F(HostCarrierTest, BytesOfTwoDevicesAndHostNumaRoundTrip) {
  allocations_.reserve(3);
  AppAllocation& on0 = Create(4 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  AppAllocation& on1 = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, 1);
  AppAllocation& host = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
  const auto p0 = Pattern(on0.size, 0x1111), p1 = Pattern(on1.size, 0x2222),
             ph = Pattern(host.size, 0x3333);
  Write(on0, p0);
  Write(on1, p1);
  Write(host, ph);

  HostCarrier carrier(api, CarrierMode::kLazy);
  const CarrierSlot slots[] = {Slot(on0), Slot(on1), Slot(host)};
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->bytes, 8 * kMiB);
  EXPECT_EQ(carrier.saved_bytes(), 8 * kMiB);
  EXPECT_TRUE(SameBytes(carrier.saved(0), p0));
  EXPECT_TRUE(SameBytes(carrier.saved(1), p1));
  EXPECT_TRUE(SameBytes(carrier.saved(2), ph));
  EXPECT_GE(saved->ns, saved->copy_ns);

  // Fresh allocations at the same VAs (what restore does), then the bytes come back.
  Replace(on0);
  Replace(on1);
  Replace(host);
  EXPECT_NE(Read(on0), p0);
  const CarrierSlot fresh[] = {Slot(on0), Slot(on1), Slot(host)};
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->bytes, 8 * kMiB);
  EXPECT_EQ(Read(on0), p0);
  EXPECT_EQ(Read(on1), p1);
  EXPECT_EQ(Read(host), ph);
}

TEST_F(HostCarrierTest, ArenaIsRegisteredOnlyWhileBytesMove) {
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  HostCarrier carrier(api, RegisteringPerCycle());
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_TRUE(carrier.Save(slots).ok());
  // Unregistered before the native checkpoint (DRIVER-FACTS "Speeds").
  EXPECT_EQ(HostFlagsResult(carrier, a), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(HostCarrierTest, TheDefaultKeepsTheArenaRegisteredAcrossCycles) {
  // Kept pinning (the default, docs/MEASURED.md M11): registered once, still registered
  // after the save and after the load, so the next cycle registers nothing.
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto pattern = Pattern(a.size, 0x4242);
  Write(a, pattern);
  HostCarrier carrier(api, CarrierOptions{});
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_TRUE(carrier.Save(slots).ok());
  EXPECT_EQ(HostFlagsResult(carrier, a), CUDA_SUCCESS);
  Replace(a);
  const CarrierSlot fresh[] = {Slot(a)};
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(Read(a), pattern);
  EXPECT_EQ(HostFlagsResult(carrier, a), CUDA_SUCCESS);
}

TEST_F(HostCarrierTest, ArenaIsReusedAcrossCyclesAndOnlyGrows) {
  allocations_.reserve(2);
  AppAllocation& small = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  AppAllocation& big = Create(6 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, 1);
  HostCarrier carrier(api, CarrierMode::kLazy);
  EXPECT_EQ(carrier.capacity(), 0u);

  const CarrierSlot first[] = {Slot(small)};
  Result<CarrierTransfer> one = carrier.Save(first);
  ASSERT_TRUE(one.ok()) << one.error().message;
  const size_t capacity = carrier.capacity();
  const std::byte* arena = carrier.saved(0).data();
  EXPECT_GE(capacity, 2 * kMiB);

  // The same bytes again: same arena, nothing provided.
  carrier.Discard();
  Result<CarrierTransfer> two = carrier.Save(first);
  ASSERT_TRUE(two.ok()) << two.error().message;
  EXPECT_EQ(carrier.capacity(), capacity);
  EXPECT_EQ(carrier.saved(0).data(), arena);
  EXPECT_EQ(two->provision_ns, 0u);

  // More bytes: it grows, and keeps that size when fewer bytes come next.
  const CarrierSlot both[] = {Slot(small), Slot(big)};
  ASSERT_TRUE(carrier.Save(both).ok());
  const size_t grown = carrier.capacity();
  EXPECT_GE(grown, 8 * kMiB);
  ASSERT_TRUE(carrier.Save(first).ok());
  EXPECT_EQ(carrier.capacity(), grown);

  // Provided ahead of time: the save provides nothing.
  ASSERT_TRUE(carrier.Provision(32 * kMiB).ok());
  EXPECT_GE(carrier.capacity(), 32 * kMiB);
  Result<CarrierTransfer> ahead = carrier.Save(both);
  ASSERT_TRUE(ahead.ok());
  EXPECT_EQ(ahead->provision_ns, 0u);
}

TEST_F(HostCarrierTest, LoadRefusesALayoutOtherThanTheSavedOne) {
  allocations_.reserve(2);
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  AppAllocation& b = Create(4 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto pattern = Pattern(a.size, 0x4444);
  Write(a, pattern);
  HostCarrier carrier(api, CarrierMode::kLazy);
  const CarrierSlot saved[] = {Slot(a)};
  ASSERT_TRUE(carrier.Save(saved).ok());

  const CarrierSlot wrong_size[] = {Slot(b)};
  Result<CarrierTransfer> refused = carrier.Load(wrong_size);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, CUDA_ERROR_INVALID_VALUE);
  const CarrierSlot too_many[] = {Slot(a), Slot(b)};
  EXPECT_FALSE(carrier.Load(too_many).ok());
  // Nothing moved: b still holds what it had, and the saved bytes are intact.
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));

  carrier.Discard();
  EXPECT_EQ(carrier.saved_bytes(), 0u);
  EXPECT_FALSE(carrier.Load(saved).ok());
}

TEST_F(HostCarrierTest, SlotWithoutContextIsRefused) {
  HostCarrier carrier(api, CarrierMode::kLazy);
  const CarrierSlot slots[] = {CarrierSlot{1, 2 * kMiB, nullptr, 0}};
  Result<CarrierTransfer> refused = carrier.Save(slots);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(refused.error().message, HasSubstr("has no context"));
}

TEST_F(HostCarrierTest, EagerModeProvidesInTheBackgroundLazyWaits) {
  HostCarrier lazy(api, CarrierMode::kLazy);
  lazy.Anticipate(8 * kMiB);
  EXPECT_EQ(lazy.capacity(), 0u);

  HostCarrier eager(api, CarrierMode::kEager);
  eager.Anticipate(8 * kMiB);
  while (eager.capacity() < 8 * kMiB) std::this_thread::yield();
  eager.Anticipate(4 * kMiB);  // fewer tracked bytes never shrink it
  eager.Anticipate(12 * kMiB);
  while (eager.capacity() < 12 * kMiB) std::this_thread::yield();
  EXPECT_GE(eager.capacity(), 12 * kMiB);
}

TEST_F(HostCarrierTest, FailedCopyIsReportedAndTheCarrierStaysUsable) {
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto pattern = Pattern(a.size, 0x5555);
  Write(a, pattern);
  HostCarrier carrier(api, CarrierMode::kLazy);
  const CarrierSlot slots[] = {Slot(a)};
  InjectOnce("cuMemcpyDtoHAsync", CUDA_ERROR_ILLEGAL_ADDRESS);
  Result<CarrierTransfer> failed = carrier.Save(slots);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_THAT(failed.error().message, HasSubstr("copying bytes [0, 2097152) of allocation handle"));
  // Every enqueued copy was synchronized: the carrier is not poisoned and works again.
  EXPECT_FALSE(carrier.poisoned());
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));
}

TEST_F(HostCarrierTest, FailedSaveSynchronizeIsSettledAndTheSaveRunsAgain) {
  AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto pattern = Pattern(a.size, 0x7777);
  Write(a, pattern);
  HostCarrier carrier(api, CarrierMode::kLazy);
  const CarrierSlot slots[] = {Slot(a)};
  InjectNth("cuStreamSynchronize", 2, CUDA_ERROR_LAUNCH_FAILED);  // the first waits for the zero scan
  Result<CarrierTransfer> failed = carrier.Save(slots);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_THAT(failed.error().message, HasSubstr("synchronizing the copies"));
  // Completion unknown: the arena is not moved (SPEC K.3 #12) and the bytes are not offered.
  EXPECT_TRUE(carrier.poisoned());
  EXPECT_FALSE(carrier.Provision(64 * kMiB).ok());
  EXPECT_EQ(carrier.saved_bytes(), 0u);
  EXPECT_FALSE(carrier.Load(slots).ok());
  // The next Save synchronizes the kept stream first, then saves afresh.
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_FALSE(carrier.poisoned());
  EXPECT_EQ(saved->bytes, 2 * kMiB);
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));
}

TEST_F(HostCarrierTest, FailedLoadSynchronizeKeepsTheBytesAndTheLoadRunsAgain) {
  LoadRunsAgainAfter("cuStreamSynchronize", CUDA_ERROR_LAUNCH_FAILED, "synchronizing the copies");
}

TEST_F(HostCarrierTest, FailedUnregisterIsRetriedBeforeTheNextRegister) {
  // Still registered after the failure: the retry unregisters first, so its register does
  // not answer CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
  LoadRunsAgainAfter("cuMemHostUnregister", CUDA_ERROR_INVALID_VALUE, "unregistering the arena");
}

TEST(CarrierMode, ReadFromTheEnvironment) {
  unsetenv("CUSNAP_CARRIER");
  EXPECT_EQ(CarrierModeFromEnvironment(), CarrierMode::kLazy);
  setenv("CUSNAP_CARRIER", "eager", 1);
  EXPECT_EQ(CarrierModeFromEnvironment(), CarrierMode::kEager);
  setenv("CUSNAP_CARRIER", "lazy", 1);
  EXPECT_EQ(CarrierModeFromEnvironment(), CarrierMode::kLazy);
  setenv("CUSNAP_CARRIER", "sometimes", 1);
  EXPECT_EQ(CarrierModeFromEnvironment(), CarrierMode::kLazy);
  unsetenv("CUSNAP_CARRIER");
}

}  // namespace
}  // namespace cusnap::shim
