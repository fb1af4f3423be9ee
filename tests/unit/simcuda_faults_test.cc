// Fault and delay injection (SIMCUDA_FAULTS, SIMCUDA_DELAYS, simcuda_test_inject_fault) and
// the device count from SIMCUDA_DEVICE_COUNT. Variables are set in forked children before
// their first driver call (the driver reads them once).
#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

TEST(SimcudaFaults, EnvironmentFailsTheNthCall) {
  pid_t child = fork_child([] {
    setenv("SIMCUDA_FAULTS", "cuMemCreate:2:2,cuMemMap:1:999", 1);
    if (cuInit(0) != CUDA_SUCCESS) return 10;
    CUmemAllocationProp prop = device_prop(0, false);
    CUmemGenericAllocationHandle a = 0, b = 0, c = 0;
    if (cuMemCreate(&a, kGranularity, &prop, 0) != CUDA_SUCCESS) return 11;
    if (cuMemCreate(&b, kGranularity, &prop, 0) != CUDA_ERROR_OUT_OF_MEMORY) return 12;  // 2nd call, result 2
    if (cuMemCreate(&c, kGranularity, &prop, 0) != CUDA_SUCCESS) return 13;
    if (simcuda_test_allocation_count() != 2) return 14;  // the failed call did nothing
    CUdeviceptr va = 0;
    if (cuMemAddressReserve(&va, kGranularity, 0, 0, 0) != CUDA_SUCCESS) return 15;
    if (cuMemMap(va, kGranularity, 0, a, 0) != static_cast<CUresult>(999)) return 16;
    return cuMemMap(va, kGranularity, 0, a, 0) == CUDA_SUCCESS ? 0 : 17;
  });
  EXPECT_EQ(wait_child(child), 0);
}

TEST(SimcudaFaults, TestHookFailsTheNthCallFromNow) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  simcuda_test_inject_fault("cuDeviceGetCount", 2, CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  // Every ABI of a name counts together: the per-thread form of cuMemcpyHtoD too.
  ASSERT_NE(use_device(0), nullptr);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 64), CUDA_SUCCESS);
  simcuda_test_inject_fault("cuMemcpyHtoD", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
  char byte = 'a';
  EXPECT_EQ(cuMemcpyHtoD_v2_ptds(p, &byte, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(p, &byte, 1), CUDA_SUCCESS);
}

TEST(SimcudaFaults, DelayKeepsTheCallInFlight) {
  pid_t child = fork_child([] {
    setenv("SIMCUDA_DELAYS", "cuDeviceGetCount:200", 1);
    if (cuInit(0) != CUDA_SUCCESS) return 10;
    auto start = std::chrono::steady_clock::now();
    int count = 0;
    if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count != 2) return 11;
    // A lower bound only: the call cannot return before its delay.
    return std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(200) ? 0 : 12;
  });
  EXPECT_EQ(wait_child(child), 0);
}

TEST(SimcudaFaults, DeviceCountAndMalformedVariables) {
  pid_t four = fork_child([] {
    setenv("SIMCUDA_DEVICE_COUNT", "4", 1);
    int count = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS) return 10;
    CUdevice dev = 0;
    if (count != 4 || cuDeviceGet(&dev, 3) != CUDA_SUCCESS || cuDeviceGet(&dev, 4) != CUDA_ERROR_INVALID_DEVICE) return 11;
    return 0;
  });
  EXPECT_EQ(wait_child(four), 0);
  pid_t none = fork_child([] {
    setenv("SIMCUDA_DEVICE_COUNT", "0", 1);
    return cuInit(0) == CUDA_ERROR_NO_DEVICE ? 0 : 1;
  });
  EXPECT_EQ(wait_child(none), 0);
  pid_t bad = fork_child([] {
    setenv("SIMCUDA_DEVICE_COUNT", "nine", 1);
    return cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
  });
  EXPECT_EQ(wait_child(bad), 0);
}

}  // namespace
