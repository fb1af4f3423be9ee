// The multicast lifecycle steps (src/shim/lifecycle/multicast_steps.h) on the simulated
// driver, in the test process: a rebuild step that failed on a driver error runs again
// (every step runnable again), without tripping over what the failed attempt left.
#include "shim/lifecycle/multicast_steps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "carrier_sim_driver.h"
#include "common/ids.h"
#include "shim_printers.h"
#include "simcuda/introspection.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;

Result<UniqueFd> NoFetch(const proto::ObjectId&, TicketKind, const proto::Capability&) {
  return Error{CUDA_ERROR_NOT_SUPPORTED, "no members in this test"};
}

// One creator's team of one device: object, member bound, multicast VA mapped with RW
// access for device 0, recorded in the table as the hooks would record them.
class MulticastStepsTest : public ::testing::Test {
 protected:
  const DriverApi& api = test::SimDriver();

  void SetUp() override {
    CUdevice device = 0;
    ASSERT_EQ(api.cuDeviceGet(&device, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuDevicePrimaryCtxRetain(&context_, device), CUDA_SUCCESS);
    ASSERT_EQ(api.cuCtxPushCurrent_v2(context_), CUDA_SUCCESS);
    CUmulticastObjectProp prop{};
    prop.numDevices = 1;
    prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.size = 1;
    ASSERT_EQ(api.cuMulticastGetGranularity(&size_, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    prop.size = size_;
    CUmemGenericAllocationHandle mc = 0;
    ASSERT_EQ(api.cuMulticastCreate(&mc, &prop), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
    CUmemAllocationProp member{};
    member.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    member.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    member.location.id = 0;
    member.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ASSERT_EQ(api.cuMemCreate(&member_, size_, &member, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMulticastBindMem(mc, 0, member_, 0, size_, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemAddressReserve(&va_, size_, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemMap(va_, size_, 0, mc, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(api.cuMemSetAccess(va_, size_, &access, 1), CUDA_SUCCESS);

    const uint64_t logical =
        table_.AddCreated(mc, MulticastProperties::FromDriver(prop), context_, SelfIdentity());
    ASSERT_NE(logical, 0u);
    const std::optional<MulticastPinned> pinned = table_.Pin(logical);
    ASSERT_TRUE(pinned.has_value());
    key_ = pinned->key;
    table_.Unpin(key_);
    table_.AddDevice(key_, 0);
    MulticastBinding binding;
    binding.device = 0;
    binding.size = size_;
    binding.untracked_member = member_;
    binding.context = context_;
    table_.AddBinding(key_, binding);
    ASSERT_TRUE(table_.AddMapping(va_, size_, 0, 0, key_, logical));
    table_.MergeAccess(va_, size_, &access, 1);
  }

  void TearDown() override {
    api.cuMemUnmap(va_, size_);
    for (const MulticastObjectInfo& o : table_.Objects()) {
      if (o.has_real) api.cuMemRelease(o.real);
    }
    api.cuMemRelease(member_);
    api.cuMemAddressFree(va_, size_);
    CUcontext popped = nullptr;
    api.cuCtxPopCurrent_v2(&popped);
  }

  CUcontext context_ = nullptr;
  size_t size_ = 0;
  CUmemGenericAllocationHandle member_ = 0;
  CUdeviceptr va_ = 0;
  MulticastKey key_ = 0;
  SharingTable sharing_;
  MulticastTable table_;
  ExportCache cache_;
};

TEST_F(MulticastStepsTest, BindFailedOnAccessRunsAgainAndMapsTheVaOnce) {
  auto inject = reinterpret_cast<decltype(&simcuda_test_inject_fault)>(
      test::SimSymbol("simcuda_test_inject_fault"));
  ASSERT_NE(inject, nullptr);
  MulticastSteps steps(api, sharing_, table_, cache_, NoFetch);
  ASSERT_TRUE(steps.DetachMulticast().ok());
  ASSERT_TRUE(steps.MulticastCreate().ok());
  ASSERT_TRUE(steps.MulticastJoin().ok());

  inject("cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY);
  Status failed = steps.MulticastBind();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_THAT(failed.error().message, HasSubstr("cuMemSetAccess at"));

  // The failed attempt's mapping was undone: the retry maps the VA again, with its access.
  Status again = steps.MulticastBind();
  ASSERT_TRUE(again.ok()) << again.error().message;
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = 0;
  unsigned long long flags = 0;
  ASSERT_EQ(api.cuMemGetAccess(&flags, &location, va_), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  // The binding survived the retry (not bound twice): the same bind again overlaps it.
  const std::vector<MulticastObjectInfo> objects = table_.Objects();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_EQ(api.cuMulticastBindMem(objects[0].real, 0, member_, 0, size_, 0),
            CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace cusnap::shim
