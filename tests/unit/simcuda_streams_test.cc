// The simulated driver's asynchronous streams (streams.h), built-in kernels (kernels.cc),
// events and stream capture replayed through graphs (graphs.cc): work on a created stream runs
// after its call returned, in order; synchronisation waits for it; a capture records instead
// of running.
#include <gmock/gmock.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

constexpr size_t kWords = 1024;

class SimcudaStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_NE(use_device(0), nullptr);
    CUmemAllocationProp prop = device_prop(0, false);
    ASSERT_EQ(cuMemCreate(&handle_, kGranularity, &prop, 0), CUDA_SUCCESS);
    va_ = map_rw(handle_, kGranularity, 0);
    ASSERT_NE(va_, 0u);
    ASSERT_EQ(cuMemsetD32_v2(va_, 0, kGranularity / 4), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleLoadData(&module_, "simcuda:builtin"), CUDA_SUCCESS);
    for (auto [name, slot] : {std::pair{"fill_u32", &fill_}, {"add_u32", &add_}, {"copy_u32", &copy_},
                              {"wait_u32", &wait_}}) {
      ASSERT_EQ(cuModuleGetFunction(slot, module_, name), CUDA_SUCCESS) << name;
    }
  }
  void TearDown() override {
    EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy_v2(stream_), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemUnmap(va_, kGranularity), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(va_, kGranularity), CUDA_SUCCESS);
    EXPECT_EQ(cuMemRelease(handle_), CUDA_SUCCESS);
  }

  uint32_t word(size_t i) const { return reinterpret_cast<const volatile uint32_t *>(va_)[i]; }
  CUdeviceptr at(size_t i) const { return va_ + 4 * i; }
  // Parks the stream on wait_u32 until word `i` becomes `value`.
  void park(size_t i, unsigned value) {
    CUdeviceptr w = at(i);
    void *params[] = {&w, &value};
    ASSERT_EQ(cuLaunchKernel(wait_, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr), CUDA_SUCCESS);
  }
  void launch3(CUfunction f, CUdeviceptr a, auto b, size_t count, CUstream stream) {
    void *params[] = {&a, &b, &count};
    ASSERT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr), CUDA_SUCCESS);
  }

  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr va_ = 0;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr, add_ = nullptr, copy_ = nullptr, wait_ = nullptr;
};

TEST_F(SimcudaStreams, AsyncWorkRunsLaterInOrderAndSynchronizeWaitsForIt) {
  park(0, 7);
  ASSERT_EQ(cuMemsetD32Async(at(1), 0xabcd, kWords, stream_), CUDA_SUCCESS);
  launch3(add_, at(1), 1u, kWords, stream_);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(word(1), 0u) << "queued behind wait_u32: not run yet";
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuMemsetD32_v2(at(0), 7, 1), CUDA_SUCCESS);  // the peer's write: the wait ends
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
  EXPECT_EQ(word(1), 0xabceu);
  EXPECT_EQ(word(kWords), 0xabceu);
  EXPECT_EQ(word(kWords + 1), 0u);
}

TEST_F(SimcudaStreams, KernelsFillAddAndCopyThroughLaunchAndLaunchEx) {
  launch3(fill_, at(0), 5u, kWords, stream_);
  launch3(copy_, at(kWords), at(0), kWords, stream_);
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream_;
  CUdeviceptr dst = at(kWords);
  unsigned value = 3;
  size_t count = kWords;
  void *params[] = {&dst, &value, &count};
  ASSERT_EQ(cuLaunchKernelEx(&config, add_, params, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(word(0), 5u);
  EXPECT_EQ(word(kWords), 8u);
  EXPECT_EQ(word(2 * kWords - 1), 8u);
  CUfunction none = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&none, module_, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  CUmodule other = nullptr;
  EXPECT_EQ(cuModuleLoadData(&other, "not an image"), CUDA_ERROR_INVALID_IMAGE);
}

TEST_F(SimcudaStreams, EventsAreReachedWhenTheStreamGetsThere) {
  CUevent event = nullptr;
  ASSERT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
  park(0, 1);
  ASSERT_EQ(cuEventRecord(event, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(event), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuMemsetD32_v2(at(0), 1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(event), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(event), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(event), CUDA_SUCCESS);
}

TEST_F(SimcudaStreams, CaptureRecordsAndGraphLaunchReplays) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  ASSERT_EQ(cuStreamIsCapturing(stream_, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  cuuint64_t id = 0;
  ASSERT_EQ(cuStreamGetCaptureInfo(stream_, &status, &id), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(id, 0u);
  launch3(add_, at(0), 2u, kWords, stream_);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_SUCCESS);
  EXPECT_EQ(word(0), 0u) << "captured work does not run";
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_ILLEGAL_STATE);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(word(0), 4u);
  EXPECT_EQ(word(kWords - 1), 4u);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

TEST_F(SimcudaStreams, NullStreamWorkStaysSynchronous) {
  ASSERT_EQ(cuMemsetD32Async(at(0), 9, kWords, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(word(kWords - 1), 9u);
  launch3(add_, at(0), 1u, kWords, nullptr);
  EXPECT_EQ(word(0), 10u);
}

// A GPU copies an aligned word that a kernel writes at the same time whole, old or new: a
// copy that read half of each (0x2FF -> 0x300 read as 0x200) made a correct job's reader
// report a lost write. A host thread flips the first half's words between all zero and all
// ones bytes while copies (cuMemcpyDtoH, cuMemcpyDtoDAsync, copy_u32) read them.
TEST_F(SimcudaStreams, CopiesReadEachAlignedWordWholeWhileItIsWritten) {
  constexpr size_t kHalf = kGranularity / 8;  // words in half of the allocation
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    auto *words = reinterpret_cast<uint32_t *>(va_);
    for (uint32_t value = ~0u; !stop.load(std::memory_order_relaxed); value = ~value) {
      for (size_t i = 0; i < kHalf; ++i) __atomic_store_n(&words[i], value, __ATOMIC_RELAXED);
    }
  });
  std::vector<uint32_t> host(kHalf);
  size_t torn = 0, first_torn = 0;
  auto count_torn = [&](const uint32_t *words) {
    for (size_t i = 0; i < kHalf; ++i) {
      if (words[i] == 0 || words[i] == ~0u) continue;
      if (torn++ == 0) first_torn = words[i];
    }
  };
  for (int round = 0; round < 40; ++round) {
    ASSERT_EQ(cuMemcpyDtoH_v2(host.data(), va_, kHalf * 4), CUDA_SUCCESS);
    count_torn(host.data());
    if (round % 2 == 0) {
      ASSERT_EQ(cuMemcpyDtoDAsync_v2(at(kHalf), va_, kHalf * 4, stream_), CUDA_SUCCESS);
    } else {
      launch3(copy_, at(kHalf), va_, kHalf, stream_);
    }
    ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
    std::vector<uint32_t> copied(kHalf);
    std::memcpy(copied.data(), reinterpret_cast<const void *>(at(kHalf)), kHalf * 4);
    count_torn(copied.data());
  }
  stop = true;
  writer.join();
  EXPECT_EQ(torn, 0u) << "the first torn word read 0x" << std::hex << first_torn;
}

TEST_F(SimcudaStreams, AnOverlappingDeviceCopyMovesAsMemmove) {
  for (uint32_t i = 0; i < kWords; ++i) reinterpret_cast<uint32_t *>(va_)[i] = i;
  ASSERT_EQ(cuMemcpyDtoD_v2(at(2), at(0), (kWords - 2) * 4), CUDA_SUCCESS);  // forwards overlap
  EXPECT_EQ(word(2), 0u);
  EXPECT_EQ(word(kWords - 1), kWords - 3);
  ASSERT_EQ(cuMemcpyDtoD_v2(at(0), at(2), (kWords - 2) * 4), CUDA_SUCCESS);  // back again
  EXPECT_EQ(word(0), 0u);
  EXPECT_EQ(word(kWords - 3), kWords - 3);
}

}  // namespace
