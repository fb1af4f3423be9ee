// The simulated driver answers the NUMA device attributes as an H200 on an x86 host does
// (cuda.h, CUdevice_attribute): HOST_NUMA VMM supported, nearest host node 0, GPU memory no
// NUMA node. Programs that check HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED before a
// HOST_NUMA cuMemCreate (as the CUDA programming guide's VMM section advises) then proceed.
#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

class SimcudaNumaAttributes : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
  static int Attribute(CUdevice_attribute attribute, CUdevice device) {
    int value = -12345;
    EXPECT_EQ(cuDeviceGetAttribute(&value, attribute, device), CUDA_SUCCESS);
    return value;
  }
};

TEST_F(SimcudaNumaAttributes, EveryDeviceAnswersLikeAnH200Host) {
  for (CUdevice device = 0; device < 2; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device), 1);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, device), 1);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, device), 0);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device), 0);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, device), CU_DEVICE_NUMA_CONFIG_NONE);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_NUMA_ID, device), -1);
  }
  int value = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 2),
            CUDA_ERROR_INVALID_DEVICE);
}

// The check-then-create sequence a HOST_NUMA user runs: the node the attribute names is one
// cuMemCreate accepts, and the memory holds what is written through a mapping.
TEST_F(SimcudaNumaAttributes, HostNumaAllocationOnTheReportedNode) {
  ASSERT_NE(use_device(0), nullptr);
  ASSERT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), 1);
  const int node = Attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, node};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(granularity, kGranularity);
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, granularity, &prop, 0), CUDA_SUCCESS);
  const CUdeviceptr va = map_rw(handle, granularity, 0);
  ASSERT_NE(va, 0u);
  ASSERT_TRUE(fill_pattern(va, granularity, 41));
  EXPECT_TRUE(has_pattern(va, granularity, 41));
  ASSERT_EQ(cuMemUnmap(va, granularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, granularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
}

}  // namespace
