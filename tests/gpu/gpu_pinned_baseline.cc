// gpu_pinned_baseline (issue 3, GPU): the pinned-copy limit the host carrier is compared
// with, measured in the same command as the carrier. Per GPU: cuMemcpyDtoHAsync and
// cuMemcpyHtoDAsync of --bytes (default 4 GiB) between cuMemAlloc memory and
// cuMemHostAlloc'd (pinned) host memory on a stream of its own, timed on the wall clock
// around the copy and cuStreamSynchronize; first each GPU alone, then all GPUs at once (one
// thread each). Also prints how long providing the pinned host memory took (the carrier's
// real cost, DRIVER-FACTS "Speeds"). GB/s are 10^9 bytes per second, best of --reps.
//
//   gpu_pinned_baseline [--bytes 4G] [--reps 3]
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_check.h"

namespace {

struct Buffers {
  int device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr device_memory = 0;
  void* host = nullptr;
};

enum class Direction { kDeviceToHost, kHostToDevice };
const char* Name(Direction d) { return d == Direction::kDeviceToHost ? "D2H" : "H2D"; }

void Copy(const Buffers& b, Direction direction, size_t bytes) {
  if (direction == Direction::kDeviceToHost) {
    CU(cuMemcpyDtoHAsync(b.host, b.device_memory, bytes, b.stream));
  } else {
    CU(cuMemcpyHtoDAsync(b.device_memory, b.host, bytes, b.stream));
  }
  CU(cuStreamSynchronize(b.stream));
}

Buffers Provide(int device, size_t bytes) {
  Buffers b;
  b.device = device;
  b.context = gpu::UsePrimaryContext(device);
  CU(cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&b.device_memory, bytes));
  CU(cuMemsetD8(b.device_memory, 0x3C, bytes));
  const double start = gpu::NowSeconds();
  CU(cuMemHostAlloc(&b.host, bytes, CU_MEMHOSTALLOC_PORTABLE));
  gpu::Log("BASELINE gpu %d: cuMemHostAlloc of %zu bytes took %.3f s", device, bytes,
           gpu::NowSeconds() - start);
  Copy(b, Direction::kDeviceToHost, bytes);  // warm-up, untimed
  Copy(b, Direction::kHostToDevice, bytes);
  return b;
}

void Free(Buffers& b) {
  CU(cuCtxSetCurrent(b.context));
  CU(cuMemFreeHost(b.host));
  CU(cuMemFree(b.device_memory));
  CU(cuStreamDestroy(b.stream));
}

double GBps(size_t bytes, double seconds) { return static_cast<double>(bytes) / 1e9 / seconds; }

void Alone(const Buffers& b, size_t bytes, int reps) {
  CU(cuCtxSetCurrent(b.context));
  for (Direction direction : {Direction::kDeviceToHost, Direction::kHostToDevice}) {
    double best = 1e30;
    std::string all;
    for (int rep = 0; rep < reps; ++rep) {
      const double start = gpu::NowSeconds();
      Copy(b, direction, bytes);
      const double seconds = gpu::NowSeconds() - start;
      best = std::min(best, seconds);
      char one[32];
      std::snprintf(one, sizeof one, " %.1f", GBps(bytes, seconds));
      all.append(one);
    }
    gpu::Log("BASELINE gpu %d alone %s: %.1f GB/s (best of %d: %.3f s for %zu bytes; each:%s)",
             b.device, Name(direction), GBps(bytes, best), reps, best, bytes, all.c_str());
  }
}

void Together(const std::vector<Buffers>& all, size_t bytes, int reps) {
  for (Direction direction : {Direction::kDeviceToHost, Direction::kHostToDevice}) {
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
      std::barrier start_line(static_cast<std::ptrdiff_t>(all.size()) + 1);
      std::vector<std::thread> threads;
      for (const Buffers& b : all) {
        threads.emplace_back([&start_line, &b, direction, bytes] {
          CU(cuCtxSetCurrent(b.context));
          start_line.arrive_and_wait();
          Copy(b, direction, bytes);
        });
      }
      const double start = gpu::NowSeconds();
      start_line.arrive_and_wait();
      for (std::thread& t : threads) t.join();
      best = std::min(best, gpu::NowSeconds() - start);
    }
    gpu::Log("BASELINE all %zu GPUs at once %s: %.1f GB/s aggregate (best of %d: %.3f s for %zu "
             "bytes per GPU)", all.size(), Name(direction), GBps(bytes * all.size(), best), reps,
             best, bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  gpu::SetRole("baseline");
  size_t bytes = size_t{4} << 30;
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bytes" && i + 1 < argc) {
      bytes = gpu::ParseSize(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      gpu::Fail("usage: gpu_pinned_baseline [--bytes 4G] [--reps 3] (unknown argument '%s')", arg.c_str());
    }
  }
  CU(cuInit(0));
  const int count = gpu::DeviceCount();
  gpu::Log("shim %s; %d GPU(s); %zu bytes per copy", gpu::ShimLoaded() ? "loaded" : "not loaded", count, bytes);
  std::vector<Buffers> buffers;
  for (int device = 0; device < count; ++device) buffers.push_back(Provide(device, bytes));
  for (const Buffers& b : buffers) Alone(b, bytes, reps);
  if (count > 1) Together(buffers, bytes, reps);
  for (Buffers& b : buffers) Free(b);
  gpu::Log("done");
  return 0;
}
