// The host carrier's chunks, on the simulated driver in the test process: a fault
// at a chunk boundary names the chunk and loses nothing (the step runs again); the zero scan
// finds all-zero chunks, which are not copied and come back as zeros; every pinning mode
// carries the same bytes; the arena is freed or capped after a cycle when asked.
#include <gmock/gmock.h>
#include <sched.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "common/settings.h"
#include "carrier_fixture.h"
#include "shim/carrier/carrier.h"
#include "shim_printers.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;

// 2 MiB chunks, so small allocations have several.
CarrierOptions Chunked(CarrierPinning pinning = CarrierPinning::kPipelined) {
  CarrierOptions options;
  options.chunk_bytes = 2 * kMiB;
  options.pinning = pinning;
  return options;
}

class CarrierChunksTest : public HostCarrierTest {
 protected:
  // A device-0 allocation of `size` bytes holding the pattern of `seed`.
  AppAllocation& Patterned(size_t size, uint32_t seed) {
    AppAllocation& a = Create(size, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    Write(a, Pattern(a.size, seed));
    return a;
  }

  // Saves `slots` with the `nth` call of `entry` failing with `result`: the error carries
  // that result and names `what`.
  void ExpectSaveFails(HostCarrier& carrier, std::span<const CarrierSlot> slots, const char* entry,
                       unsigned nth, CUresult result, const std::string& what) {
    InjectNth(entry, nth, result);
    Result<CarrierTransfer> failed = carrier.Save(slots);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.error().code, result);
    EXPECT_THAT(failed.error().message, HasSubstr(what));
  }

  // Saves `a`, replaces it with a fresh allocation holding other bytes, and returns the
  // slots of the fresh one.
  std::vector<CarrierSlot> SaveAndReplace(HostCarrier& carrier, AppAllocation& a) {
    const CarrierSlot slots[] = {Slot(a)};
    Result<CarrierTransfer> saved = carrier.Save(slots);
    EXPECT_TRUE(saved.ok()) << saved.error().message;
    Replace(a);
    Scribble(a);
    return {Slot(a)};
  }
};

TEST_F(CarrierChunksTest, SaveFaultAtAChunkBoundaryNamesTheChunkAndTheSaveRunsAgain) {
  AppAllocation& a = Patterned(6 * kMiB, 0x1515);
  const auto pattern = Pattern(a.size, 0x1515);
  HostCarrier carrier(api, Chunked());
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_NO_FATAL_FAILURE(ExpectSaveFails(carrier, slots, "cuMemcpyDtoHAsync", 2, CUDA_ERROR_ILLEGAL_ADDRESS,
                                          "copying bytes [2097152, 4194304) of allocation handle"));
  // Nothing half-saved is offered, nothing stays pinned, and the device bytes are intact.
  EXPECT_EQ(carrier.saved_bytes(), 0u);
  EXPECT_FALSE(carrier.registered());
  EXPECT_FALSE(carrier.poisoned());
  EXPECT_EQ(Read(a), pattern);
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->chunks, 3u);
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));
}

TEST_F(CarrierChunksTest, LoadFaultAtAChunkBoundaryKeepsTheBytesAndTheLoadRunsAgain) {
  AppAllocation& a = Patterned(6 * kMiB, 0x2525);
  const auto pattern = Pattern(a.size, 0x2525);
  HostCarrier carrier(api, Chunked());
  const std::vector<CarrierSlot> fresh = SaveAndReplace(carrier, a);
  InjectNth("cuMemcpyHtoDAsync", 3, CUDA_ERROR_ILLEGAL_ADDRESS);
  Result<CarrierTransfer> failed = carrier.Load(fresh);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message, HasSubstr("restoring bytes [4194304, 6291456) of allocation handle"));
  EXPECT_EQ(carrier.saved_bytes(), 6 * kMiB);
  EXPECT_FALSE(carrier.registered());
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->bytes, 6 * kMiB);
  EXPECT_EQ(Read(a), pattern);
}

TEST_F(CarrierChunksTest, PinningFaultAtAChunkBoundaryUnpinsEverythingAndRunsAgain) {
  AppAllocation& a = Patterned(6 * kMiB, 0x3535);
  const auto pattern = Pattern(a.size, 0x3535);
  HostCarrier carrier(api, Chunked());
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_NO_FATAL_FAILURE(
      ExpectSaveFails(carrier, slots, "cuMemHostRegister", 2, CUDA_ERROR_OUT_OF_MEMORY,
                      "registering the arena's bytes [2097152, 4194304) of allocation handle"));
  EXPECT_FALSE(carrier.registered());
  ASSERT_TRUE(carrier.Save(slots).ok());
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));

  // Unpinning behind the copies fails at the second chunk: named, retried before the next
  // transfer, the bytes kept.
  Replace(a);
  const CarrierSlot fresh[] = {Slot(a)};
  InjectNth("cuMemHostUnregister", 1, CUDA_ERROR_INVALID_VALUE);
  Result<CarrierTransfer> unpin = carrier.Load(fresh);
  ASSERT_FALSE(unpin.ok());
  EXPECT_THAT(unpin.error().message, HasSubstr("unregistering the arena's bytes [0, 2097152)"));
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_FALSE(carrier.registered());
  EXPECT_EQ(Read(a), pattern);
}

TEST_F(CarrierChunksTest, KeptPinningFaultIsNamedUnpinsAndTheNextSavePinsTheWholeArena) {
  // Three 2 MiB chunks, the middle one zero: kept pinning registers the two copied chunks
  // ahead of their copies, then the zero chunk's bytes (no copy uses them).
  AppAllocation& a = Create(6 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  std::vector<uint32_t> words = Pattern(a.size, 0x4545);
  std::fill(words.begin() + static_cast<long>(2 * kMiB / 4), words.begin() + static_cast<long>(4 * kMiB / 4), 0u);
  Write(a, words);
  HostCarrier carrier(api, Chunked(CarrierPinning::kKept));
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_NO_FATAL_FAILURE(ExpectSaveFails(carrier, slots, "cuMemHostRegister", 3, CUDA_ERROR_OUT_OF_MEMORY,
                                          "registering the arena's bytes [2097152, 4194304) (kept "
                                          "pinned for later cycles: no copy of this one uses them)"));
  EXPECT_FALSE(carrier.registered());  // the two pieces registered before the fault are unpinned
  EXPECT_EQ(carrier.saved_bytes(), 0u);
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->chunks, 2u);
  EXPECT_TRUE(carrier.registered());
  EXPECT_TRUE(SameBytes(carrier.saved(0), words));

  // Warm: the arena stays registered, so no registration happens (a fault there is never hit)
  // and a smaller save fits the registered arena.
  AppAllocation& b = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  const auto small = Pattern(b.size, 0x4646);
  Write(b, small);
  InjectOnce("cuMemHostRegister", CUDA_ERROR_OUT_OF_MEMORY);
  const CarrierSlot smaller[] = {Slot(b)};
  Result<CarrierTransfer> warm = carrier.Save(smaller);
  ASSERT_TRUE(warm.ok()) << warm.error().message;
  EXPECT_TRUE(SameBytes(carrier.saved(0), small));
  EXPECT_EQ(carrier.capacity(), 6 * kMiB);
  // The fault is still pending: the carrier did not register anything.
  std::vector<std::byte> buffer(4096);
  EXPECT_EQ(api.cuMemHostRegister_v2(buffer.data(), buffer.size(), 0), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(CarrierChunksTest, KeptPinningWhoseUnpinningFailedToIsPinnedAgainByTheNextSave) {
  AppAllocation& a = Patterned(6 * kMiB, 0x4747);
  const auto pattern = Pattern(a.size, 0x4747);
  HostCarrier carrier(api, Chunked(CarrierPinning::kKept));
  const CarrierSlot slots[] = {Slot(a)};
  // The second piece fails to register; unpinning the first then fails too: the first
  // failure is the one named, and the piece stays registered.
  InjectNth("cuMemHostUnregister", 1, CUDA_ERROR_INVALID_VALUE);
  ASSERT_NO_FATAL_FAILURE(ExpectSaveFails(carrier, slots, "cuMemHostRegister", 2, CUDA_ERROR_OUT_OF_MEMORY,
                                          "registering the arena's bytes [2097152, 4194304)"));
  EXPECT_TRUE(carrier.registered());
  // The next save unregisters it, pins the whole arena and keeps it.
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_TRUE(carrier.registered());
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));
  Replace(a);
  const CarrierSlot fresh[] = {Slot(a)};
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(Read(a), pattern);
}

class ZeroChunksTest : public CarrierChunksTest {
 protected:
  // One non-zero byte at `offset` of an 8 MiB allocation (four 2 MiB chunks): only its
  // chunk is copied; the others come back as zeros over whatever the fresh allocation held.
  void OneNonZeroByteAt(size_t offset) {
    AppAllocation& a = Create(8 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    std::vector<uint32_t> words(a.size / 4, 0);
    reinterpret_cast<unsigned char*>(words.data())[offset] = 0x01;
    Write(a, words);
    HostCarrier carrier(api, Chunked());
    const CarrierSlot slots[] = {Slot(a)};
    Result<CarrierTransfer> saved = carrier.Save(slots);
    ASSERT_TRUE(saved.ok()) << saved.error().message;
    EXPECT_EQ(saved->bytes, 8 * kMiB);
    EXPECT_EQ(saved->zero_bytes, 6 * kMiB);
    EXPECT_EQ(saved->chunks, 1u);
    for (size_t chunk = 0; chunk < 4; ++chunk) {
      EXPECT_EQ(carrier.saved_zero(0, chunk * 2 * kMiB), chunk != offset / (2 * kMiB)) << chunk;
    }
    Replace(a);
    Scribble(a);
    const CarrierSlot fresh[] = {Slot(a)};
    Result<CarrierTransfer> loaded = carrier.Load(fresh);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->zero_bytes, 6 * kMiB);
    EXPECT_EQ(Read(a), words);
  }
};

TEST_F(ZeroChunksTest, AllZeroAllocationIsNotCopiedAndComesBackZero) {
  AppAllocation& a = Create(8 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, 1);
  const std::vector<uint32_t> zeros(a.size / 4, 0);
  Write(a, zeros);
  HostCarrier carrier(api, Chunked());
  const std::vector<CarrierSlot> fresh = SaveAndReplace(carrier, a);
  EXPECT_TRUE(carrier.saved_zero(0, 0));
  EXPECT_TRUE(carrier.saved_zero(0, a.size - 1));
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->bytes, 8 * kMiB);
  EXPECT_EQ(loaded->zero_bytes, 8 * kMiB);
  EXPECT_EQ(loaded->chunks, 0u);
  EXPECT_EQ(Read(a), zeros);
}

TEST_F(ZeroChunksTest, OneNonZeroByteAtTheFirstOffset) { OneNonZeroByteAt(0); }
TEST_F(ZeroChunksTest, OneNonZeroByteAtTheLastOffset) { OneNonZeroByteAt(8 * kMiB - 1); }
TEST_F(ZeroChunksTest, OneNonZeroByteAtAMiddleOffset) { OneNonZeroByteAt(5 * kMiB + 3); }

TEST_F(ZeroChunksTest, ScanOffCopiesEveryChunk) {
  AppAllocation& a = Create(4 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  Write(a, std::vector<uint32_t>(a.size / 4, 0));
  CarrierOptions options = Chunked();
  options.zero_scan = false;
  HostCarrier carrier(api, options);
  const CarrierSlot slots[] = {Slot(a)};
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->zero_bytes, 0u);
  EXPECT_EQ(saved->chunks, 2u);
}

TEST_F(ZeroChunksTest, HostNumaMemoryIsNotScanned) {
  AppAllocation& a = Create(4 * kMiB, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, 0);
  Write(a, std::vector<uint32_t>(a.size / 4, 0));
  HostCarrier carrier(api, Chunked());
  CarrierSlot slot = Slot(a);
  slot.scan = false;
  const CarrierSlot slots[] = {slot};
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->zero_bytes, 0u);
}

TEST_F(ZeroChunksTest, AFailedScanSynchronizeIsNamedAndTheSaveRunsAgain) {
  AppAllocation& a = Patterned(4 * kMiB, 0x4545);
  const auto pattern = Pattern(a.size, 0x4545);
  HostCarrier carrier(api, Chunked());
  const CarrierSlot slots[] = {Slot(a)};
  ASSERT_NO_FATAL_FAILURE(ExpectSaveFails(carrier, slots, "cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED,
                                          "synchronizing the zero-chunk scan"));
  EXPECT_TRUE(carrier.poisoned());
  Result<CarrierTransfer> saved = carrier.Save(slots);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_FALSE(carrier.poisoned());
  EXPECT_TRUE(SameBytes(carrier.saved(0), pattern));
}

class PinningTest : public CarrierChunksTest, public ::testing::WithParamInterface<CarrierPinning> {};

TEST_P(PinningTest, EveryModeCarriesTheBytesOfTwoDevices) {
  allocations_.reserve(2);
  AppAllocation& on0 = Create(6 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  AppAllocation& on1 = Create(4 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 1, 1);
  const auto p0 = Pattern(on0.size, 0x6060), p1 = Pattern(on1.size, 0x6161);
  Write(on0, p0);
  Write(on1, p1);
  HostCarrier carrier(api, Chunked(GetParam()));
  for (int cycle = 0; cycle < 2; ++cycle) {
    const CarrierSlot slots[] = {Slot(on0), Slot(on1)};
    Result<CarrierTransfer> saved = carrier.Save(slots);
    ASSERT_TRUE(saved.ok()) << saved.error().message;
    EXPECT_EQ(saved->chunks, 5u);
    // Kept: pinned across the native cycle; the others unpin before it.
    EXPECT_EQ(carrier.registered(), GetParam() == CarrierPinning::kKept);
    Replace(on0);
    Replace(on1);
    Scribble(on0);
    const CarrierSlot fresh[] = {Slot(on0), Slot(on1)};
    Result<CarrierTransfer> loaded = carrier.Load(fresh);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(Read(on0), p0);
    EXPECT_EQ(Read(on1), p1);
    carrier.Discard();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PinningTest,
                         ::testing::Values(CarrierPinning::kPipelined, CarrierPinning::kKept,
                                           CarrierPinning::kTransfer));

TEST_F(CarrierChunksTest, KeepOptionFreesOrCapsTheArenaAfterACycle) {
  AppAllocation& a = Create(8 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  Write(a, Pattern(a.size, 0x7070));
  for (const size_t keep : {size_t{0}, 2 * kMiB, SIZE_MAX}) {
    CarrierOptions options = Chunked(CarrierPinning::kKept);
    options.keep_bytes = keep;
    HostCarrier carrier(api, options);
    const CarrierSlot slots[] = {Slot(a)};
    ASSERT_TRUE(carrier.Save(slots).ok());
    EXPECT_EQ(carrier.capacity(), 8 * kMiB);
    carrier.Discard();
    EXPECT_EQ(carrier.capacity(), keep == SIZE_MAX ? 8 * kMiB : keep);
    EXPECT_EQ(carrier.registered(), keep == SIZE_MAX);  // a capped arena is unpinned first
    ASSERT_TRUE(carrier.Save(slots).ok());  // grows again
    EXPECT_EQ(carrier.capacity(), 8 * kMiB);
  }
}

TEST(CarrierOptions, ReadFromTheEnvironment) {
  for (const char* name : {"CUSNAP_CARRIER_PIN", "CUSNAP_CARRIER_CHUNK_MIB", "CUSNAP_ZERO_SCAN",
                           "CUSNAP_CARRIER_KEEP", "CUSNAP_CARRIER_THREADS", "CUSNAP_CARRY"}) {
    unsetenv(name);
  }
  CarrierOptions defaults = CarrierOptionsFromEnvironment();
  EXPECT_EQ(defaults.pinning, CarrierPinning::kKept);
  EXPECT_EQ(defaults.chunk_bytes, 64 * kMiB);
  EXPECT_TRUE(defaults.zero_scan);
  EXPECT_EQ(defaults.keep_bytes, SIZE_MAX);
  EXPECT_EQ(CarryScopeFromEnvironment(), CarryScope::kAll);
  // The defaults the settings table (and so the README) names.
  EXPECT_EQ(cusnap::settings::FallbackText(cusnap::settings::kCarrierChunkMib),
            std::to_string(defaults.chunk_bytes / kMiB));
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  const unsigned cpus = static_cast<unsigned>(CPU_COUNT(&allowed));
  EXPECT_EQ(defaults.provision_threads, std::min(16u, cpus));
  EXPECT_EQ(cusnap::settings::FallbackText(cusnap::settings::kCarrierThreads),
            "16, at most the CPUs the process may run on");

  setenv("CUSNAP_CARRIER_PIN", "kept", 1);
  setenv("CUSNAP_CARRIER_CHUNK_MIB", "16", 1);
  setenv("CUSNAP_ZERO_SCAN", "off", 1);
  setenv("CUSNAP_CARRIER_KEEP", "1024", 1);
  setenv("CUSNAP_CARRIER_THREADS", "4", 1);
  setenv("CUSNAP_CARRY", "shared", 1);
  CarrierOptions set = CarrierOptionsFromEnvironment();
  EXPECT_EQ(set.pinning, CarrierPinning::kKept);
  EXPECT_EQ(set.chunk_bytes, 16 * kMiB);
  EXPECT_FALSE(set.zero_scan);
  EXPECT_EQ(set.keep_bytes, 1024 * kMiB);
  EXPECT_EQ(set.provision_threads, 4u);
  EXPECT_EQ(CarryScopeFromEnvironment(), CarryScope::kShared);

  // Unreadable values fall back to the defaults.
  setenv("CUSNAP_CARRIER_PIN", "sometimes", 1);
  setenv("CUSNAP_CARRIER_CHUNK_MIB", "3", 1);
  setenv("CUSNAP_CARRIER_KEEP", "none", 1);
  setenv("CUSNAP_CARRY", "some", 1);
  CarrierOptions fallback = CarrierOptionsFromEnvironment();
  EXPECT_EQ(fallback.pinning, CarrierPinning::kKept);
  EXPECT_EQ(fallback.chunk_bytes, 64 * kMiB);
  EXPECT_EQ(fallback.keep_bytes, 0u);
  EXPECT_EQ(CarryScopeFromEnvironment(), CarryScope::kAll);
  for (const char* name : {"CUSNAP_CARRIER_PIN", "CUSNAP_CARRIER_CHUNK_MIB", "CUSNAP_ZERO_SCAN",
                           "CUSNAP_CARRIER_KEEP", "CUSNAP_CARRIER_THREADS", "CUSNAP_CARRY"}) {
    unsetenv(name);
  }
}

TEST(ZeroScanPtx, DeclaresTheEntryTheSimulatedDriverRuns) {
  EXPECT_THAT(ZeroScanPtx(), HasSubstr(".visible .entry chunk_nonzero_u64("));
  EXPECT_THAT(ZeroScanPtx(), HasSubstr(".target sm_70"));
}

}  // namespace
}  // namespace cusnap::shim
