// libcudart.so.13 on the simulated driver: versions, the four driver entry-point resolvers
// (statuses as DRIVER-FACTS F10 records them), devices, malloc, memcpy and errors.
#include "simcuda_test_util.h"  // first: the driver API in internal mode

// Internal mode: every runtime name as itself (the _ptsz forms declared, nothing deprecated).
#define __CUDART_API_VERSION_INTERNAL 1
#include <cuda_runtime_api.h>

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported, and programs still call
// it: the test calls it on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using namespace simcuda_test;

TEST(SimcudaRuntime, VersionsAndDevices) {
  int version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13000);
  ASSERT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, 13010);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 1);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
}

TEST(SimcudaRuntime, EntryPointsResolveThroughTheDriver) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPoint("cuMemCreate", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMemCreate));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchEntryPoint", &fn, 13000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 9000, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(status, cudaDriverEntryPointVersionNotSufficent);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 13020, cudaEnableDefault, &status), cudaErrorInvalidValue);
  // The runtime's own version (13000) picks the original multicast bind ABI; 13010 the new one.
  ASSERT_EQ(cudaGetDriverEntryPoint("cuMulticastBindMem", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMulticastBindMem));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMulticastBindMem", &fn, 13010, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMulticastBindMem_v2));
  // The _ptsz forms default to the per-thread default stream.
  ASSERT_EQ(cudaGetDriverEntryPoint_ptsz("cuMemcpyAsync", &fn, cudaEnableDefault, &status), cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMemcpyAsync_ptsz));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion_ptsz("cuMemcpyAsync", &fn, 12000, cudaEnableLegacyStream, &status), cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMemcpyAsync));
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemcpyAsync", &fn, 12000, cudaEnablePerThreadDefaultStream, &status), cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void *>(&cuMemcpyAsync_ptsz));
  EXPECT_EQ(cudaGetDriverEntryPoint(nullptr, &fn, cudaEnableDefault, &status), cudaErrorInvalidValue);
}

TEST(SimcudaRuntime, MallocMemcpyFree) {
  void *p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 5000), cudaSuccess);
  std::string in(5000, 'r'), out(5000, '\0');
  ASSERT_EQ(cudaMemcpy(p, in.data(), in.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), p, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, in);
  simcuda_mapping_info info{};
  ASSERT_EQ(simcuda_test_mapping_at(reinterpret_cast<uint64_t>(p), &info), 0);
  EXPECT_EQ(info.location_id, 0);  // device 0 unless cudaSetDevice says otherwise
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

}  // namespace
