// DRIVER-FACTS F10 on a CUDA 13.0 driver (SIMCUDA_DRIVER_VERSION=13000, set by this program's
// own main before the driver reads it): asking for the 13.1 device-explicit multicast bind ABI
// is CUDA_ERROR_INVALID_VALUE, below it the original ABI comes back.
#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

TEST(SimcudaDriver13000, MulticastBindAt13010IsInvalidValue) {
  int version = 0;
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  void *p = reinterpret_cast<void *>(0x1);
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuMulticastBindMem", &p, 13010, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p, nullptr);
  ASSERT_EQ(cuGetProcAddress_v2("cuMulticastBindMem", &p, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void *>(&cuMulticastBindMem));
  ASSERT_EQ(cuGetProcAddress_v2("cuMulticastBindAddr", &p, 12010, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void *>(&cuMulticastBindAddr));
  // The rest of F10 is the same on this driver.
  ASSERT_EQ(cuGetProcAddress_v2("cuNoSuchEntryPoint", &p, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  ASSERT_EQ(cuGetProcAddress_v2("cuMemCreate", &p, 9000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  ASSERT_EQ(cuGetProcAddress_v2("cuMemcpyAsync", &p, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void *>(&cuMemcpyAsync_ptsz));
}

}  // namespace

int main(int argc, char **argv) {
  setenv("SIMCUDA_DRIVER_VERSION", "13000", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
