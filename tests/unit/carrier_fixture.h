// The host carrier test fixture (carrier_test.cc, carrier_chunks_test.cc): allocations on the
// simulated driver, loaded in the test process, with their bytes written and read back, and
// driver faults injected.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "carrier_sim_driver.h"
#include "shim/carrier/carrier.h"
#include "simcuda/introspection.h"

namespace cusnap::shim {

constexpr size_t kMiB = size_t{1} << 20;

using MemcpyHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using MemcpyDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using HostGetFlags = CUresult (*)(unsigned*, void*);

// One application allocation: its handle, its VA and where it lives.
struct AppAllocation {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
  CUmemAllocationProp prop{};
  CUcontext context = nullptr;
  CUdevice device = 0;
};

class HostCarrierTest : public ::testing::Test {
 protected:
  const DriverApi& api = test::SimDriver();
  MemcpyHtoD htod = reinterpret_cast<MemcpyHtoD>(test::SimSymbol("cuMemcpyHtoD_v2"));
  MemcpyDtoH dtoh = reinterpret_cast<MemcpyDtoH>(test::SimSymbol("cuMemcpyDtoH_v2"));

  void SetUp() override {
    ASSERT_NE(htod, nullptr);
    ASSERT_NE(dtoh, nullptr);
  }
  void TearDown() override {
    for (AppAllocation& a : allocations_) {
      api.cuCtxPushCurrent_v2(a.context);
      api.cuMemUnmap(a.va, a.size);
      api.cuMemRelease(a.handle);
      api.cuMemAddressFree(a.va, a.size);
      CUcontext popped = nullptr;
      api.cuCtxPopCurrent_v2(&popped);
    }
  }

  CUcontext Primary(int ordinal) {
    CUdevice device = 0;
    EXPECT_EQ(api.cuDeviceGet(&device, ordinal), CUDA_SUCCESS);
    CUcontext context = nullptr;
    EXPECT_EQ(api.cuDevicePrimaryCtxRetain(&context, device), CUDA_SUCCESS);
    return context;
  }

  // Creates a POSIX-capable allocation at `location`, maps it, gives `device` RW access.
  AppAllocation& Create(size_t size, CUmemLocationType location, int location_id, int device) {
    AppAllocation a;
    a.size = size;
    a.device = device;
    a.context = Primary(device);
    a.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    a.prop.location.type = location;
    a.prop.location.id = location_id;
    a.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT_EQ(api.cuCtxPushCurrent_v2(a.context), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemCreate(&a.handle, size, &a.prop, 0), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemAddressReserve(&a.va, size, 0, 0, 0), CUDA_SUCCESS);
    Map(a);
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
    return allocations_.emplace_back(a);
  }

  void Map(const AppAllocation& a) {
    ASSERT_EQ(api.cuMemMap(a.va, a.size, 0, a.handle, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = a.device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(api.cuMemSetAccess(a.va, a.size, &access, 1), CUDA_SUCCESS);
  }

  // What the device would lose in a native checkpoint: a fresh allocation at the same VA.
  void Replace(AppAllocation& a) {
    ASSERT_EQ(api.cuCtxPushCurrent_v2(a.context), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemUnmap(a.va, a.size), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemRelease(a.handle), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemCreate(&a.handle, a.size, &a.prop, 0), CUDA_SUCCESS);
    Map(a);
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
  }

  static std::vector<uint32_t> Pattern(size_t bytes, uint32_t seed) {
    std::vector<uint32_t> words(bytes / sizeof(uint32_t));
    for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    return words;
  }
  void Write(const AppAllocation& a, const std::vector<uint32_t>& words) {
    ASSERT_EQ(api.cuCtxPushCurrent_v2(a.context), CUDA_SUCCESS);
    ASSERT_EQ(htod(a.va, words.data(), a.size), CUDA_SUCCESS);
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
  }
  std::vector<uint32_t> Read(const AppAllocation& a) {
    std::vector<uint32_t> words(a.size / sizeof(uint32_t));
    EXPECT_EQ(api.cuCtxPushCurrent_v2(a.context), CUDA_SUCCESS);
    EXPECT_EQ(dtoh(words.data(), a.va, a.size), CUDA_SUCCESS);
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
    return words;
  }
  static CarrierSlot Slot(const AppAllocation& a) {
    return CarrierSlot{a.handle, a.size, a.context, a.device};
  }
  static bool SameBytes(std::span<const std::byte> saved, const std::vector<uint32_t>& words) {
    return saved.size() == words.size() * sizeof(uint32_t) &&
           std::memcmp(saved.data(), words.data(), saved.size()) == 0;
  }

  // Makes the next call of `entry` answer `result`.
  void InjectOnce(const char* entry, CUresult result) { InjectNth(entry, 1, result); }
  // Makes the `nth` next call of `entry` answer `result` (1 = the next).
  void InjectNth(const char* entry, unsigned nth, CUresult result) {
    auto inject = reinterpret_cast<decltype(&simcuda_test_inject_fault)>(
        test::SimSymbol("simcuda_test_inject_fault"));
    ASSERT_NE(inject, nullptr);
    inject(entry, nth, result);
  }

  // Options whose arena is registered only while bytes move (pipelined pinning; the default,
  // kept, leaves it registered): the tests of registration and unregistration use these.
  static CarrierOptions RegisteringPerCycle() {
    CarrierOptions options;
    options.pinning = CarrierPinning::kPipelined;
    return options;
  }

  // Saves a 2 MiB allocation, replaces it, fails a Load on `entry` with `result` (its
  // message naming `what`), then loads again: the retry brings the saved bytes back and
  // leaves the arena unregistered (RegisteringPerCycle).
  void LoadRunsAgainAfter(const char* entry, CUresult result, const char* what) {
    AppAllocation& a = Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    const auto pattern = Pattern(a.size, 0x8888);
    Write(a, pattern);
    HostCarrier carrier(api, RegisteringPerCycle());
    const CarrierSlot slots[] = {Slot(a)};
    ASSERT_TRUE(carrier.Save(slots).ok());
    Replace(a);
    const CarrierSlot fresh[] = {Slot(a)};
    InjectOnce(entry, result);
    Result<CarrierTransfer> failed = carrier.Load(fresh);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.error().code, result);
    EXPECT_THAT(failed.error().message, ::testing::HasSubstr(what));
    EXPECT_EQ(carrier.saved_bytes(), 2 * kMiB);  // only read: kept for the retry
    Result<CarrierTransfer> loaded = carrier.Load(fresh);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->bytes, 2 * kMiB);
    EXPECT_FALSE(carrier.poisoned());
    EXPECT_EQ(Read(a), pattern);
    EXPECT_EQ(HostFlagsResult(carrier, a), CUDA_ERROR_INVALID_VALUE);
  }

  // cuMemHostGetFlags of the carrier's saved bytes, in `a`'s context: CUDA_SUCCESS while the
  // arena is registered, CUDA_ERROR_INVALID_VALUE when not.
  CUresult HostFlagsResult(const HostCarrier& carrier, const AppAllocation& a) {
    auto get_flags = reinterpret_cast<HostGetFlags>(test::SimSymbol("cuMemHostGetFlags"));
    if (get_flags == nullptr || api.cuCtxPushCurrent_v2(a.context) != CUDA_SUCCESS) {
      return CUDA_ERROR_NOT_FOUND;
    }
    unsigned flags = 0;
    const CUresult r = get_flags(&flags, const_cast<std::byte*>(carrier.saved(0).data()));
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
    return r;
  }

  // Fills `a` with a byte pattern no zero scan can miss, so a load must overwrite it all.
  void Scribble(const AppAllocation& a) { Write(a, std::vector<uint32_t>(a.size / 4, 0xdeadbeef)); }

  std::vector<AppAllocation> allocations_;
};


}  // namespace cusnap::shim
