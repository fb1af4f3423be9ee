// Multicast objects on the simulated driver, in one process: argument checks, binds that wait
// for the whole team, both bind ABIs, unbind, mapping the object, and release.
#include <thread>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

class SimcudaMulticast : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
  static CUmulticastObjectProp prop(unsigned devices, size_t size) {
    CUmulticastObjectProp p{};
    p.numDevices = devices;
    p.size = size;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
  }
};

TEST_F(SimcudaMulticast, CreateChecksArguments) {
  CUmemGenericAllocationHandle mc = 0;
  CUmulticastObjectProp p = prop(2, kGranularity);
  EXPECT_EQ(cuMulticastCreate(nullptr, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastCreate(&mc, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUmulticastObjectProp too_many = prop(3, kGranularity);
  EXPECT_EQ(cuMulticastCreate(&mc, &too_many), CUDA_ERROR_INVALID_VALUE);
  CUmulticastObjectProp unaligned = prop(2, kGranularity + 1);
  EXPECT_EQ(cuMulticastCreate(&mc, &unaligned), CUDA_ERROR_INVALID_VALUE);
  size_t granularity = 0;
  ASSERT_EQ(cuMulticastGetGranularity(&granularity, &p, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(granularity, kGranularity);
  ASSERT_EQ(cuMulticastGetGranularity(&granularity, &p, CU_MULTICAST_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(granularity, size_t{512} << 20);
  EXPECT_EQ(cuMulticastGetGranularity(nullptr, &p, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 5), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastAddDevice(0x77, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_ERROR_INVALID_VALUE);  // already in the team
  ASSERT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimcudaMulticast, BindWaitsForTheWholeTeam) {
  CUmemGenericAllocationHandle mc = 0;
  CUmulticastObjectProp p = prop(2, 2 * kGranularity);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  CUmemGenericAllocationHandle mem[2] = {};
  for (int d = 0; d < 2; ++d) {
    CUmemAllocationProp a = device_prop(d, true);
    ASSERT_EQ(cuMemCreate(&mem[d], 2 * kGranularity, &a, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  Pipe bound;
  std::thread binder([&] {
    // Device 1 is not in the team yet: this bind waits until it is.
    EXPECT_EQ(cuMulticastBindMem(mc, 0, mem[0], 0, 2 * kGranularity, 0), CUDA_SUCCESS);
    bound.send('B');
  });
  ASSERT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);
  EXPECT_EQ(bound.receive(), 'B');
  binder.join();
  // The device-explicit ABI; memory must live on the named device.
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 0, mem[1], 0, 2 * kGranularity, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 1, 0, mem[1], 0, 4 * kGranularity, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastBindMem_v2(mc, 1, 0, mem[1], 0, 2 * kGranularity, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, mem[0], 0, kGranularity, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps
  EXPECT_EQ(cuMulticastUnbind(mc, 0, 0, kGranularity), CUDA_ERROR_INVALID_VALUE);  // not that binding
  ASSERT_EQ(cuMulticastUnbind(mc, 0, 0, 2 * kGranularity), CUDA_SUCCESS);
  // Rebind device 0 by address: v1 binds for the current context's device.
  CUdeviceptr va = map_rw(mem[0], 2 * kGranularity, 0);
  ASSERT_NE(va, 0u);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_NE(use_device(1), nullptr);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_ERROR_INVALID_DEVICE);  // memory is on 0
  ASSERT_NE(use_device(0), nullptr);
  ASSERT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastUnbind(mc, 0, 0, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastBindAddr_v2(mc, 0, 0, va, 2 * kGranularity, 0), CUDA_SUCCESS);
  // The multicast object maps like an allocation.
  CUdeviceptr mc_va = map_rw(mc, 2 * kGranularity, 0);
  ASSERT_NE(mc_va, 0u);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void *>(mc_va)), CUDA_SUCCESS);
  EXPECT_EQ(retained, mc);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(mc_va, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastUnbind(mc, 1, 0, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // object gone
}

}  // namespace
