// gpu_carry_hold (GPU bench): one process holding GPU memory for the suspend/resume
// bench (bench/gpu_suspend_vs_native.py). On its device 0 (CUDA_VISIBLE_DEVICES applies) it
// creates --bytes of VMM memory in allocations of at most --allocation bytes, private
// (handle type NONE) or, with --shared, POSIX-capable (what cusnap must carry, DRIVER-FACTS
// F3); the first (1 - --zero-fraction) of each allocation holds a pattern, the rest zeros.
// Prints "@@READY <pid>", then reads commands from standard input:
//   verify  checks every byte (pattern and zeros): "@@VERIFY PASS" or "@@VERIFY FAIL"
//   quit    (or end of input) unmaps and releases everything: "@@DONE"
//
//   gpu_carry_hold --bytes 4G [--allocation 1G] [--shared] [--zero-fraction 0.5]
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "gpu/gpu_check.h"
#include "gpu/gpu_pattern.h"
#include "gpu/gpu_vmm.h"

namespace {

struct Held {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
  size_t pattern_bytes = 0;  // the rest is zeros
  uint64_t seed = 0;
};

// True when [va, va + bytes) reads back as zeros (64 MiB at a time).
bool AllZero(CUdeviceptr va, size_t bytes) {
  constexpr size_t kStep = size_t{64} << 20;
  std::vector<uint64_t> host(kStep / sizeof(uint64_t));
  for (size_t at = 0; at < bytes; at += kStep) {
    const size_t n = bytes - at < kStep ? bytes - at : kStep;
    CU(cuMemcpyDtoH(host.data(), va + at, n));
    for (size_t i = 0; i < n / sizeof(uint64_t); ++i) {
      if (host[i] != 0) {
        gpu::Log("zero part: word at byte %zu is 0x%llx, not 0", at + i * sizeof(uint64_t),
                 static_cast<unsigned long long>(host[i]));
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gpu::SetRole("hold");
  size_t bytes = size_t{1} << 30, allocation = size_t{1} << 30;
  bool shared = false;
  double zero_fraction = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bytes" && i + 1 < argc) {
      bytes = gpu::ParseSize(argv[++i]);
    } else if (arg == "--allocation" && i + 1 < argc) {
      allocation = gpu::ParseSize(argv[++i]);
    } else if (arg == "--shared") {
      shared = true;
    } else if (arg == "--zero-fraction" && i + 1 < argc) {
      zero_fraction = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s --bytes N [--allocation N] [--shared] [--zero-fraction F]\n", argv[0]);
      return 2;
    }
  }
  gpu::UsePrimaryContext(0);
  CUmemAllocationProp prop = gpu::PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  if (!shared) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  const size_t granularity = gpu::Granularity(prop);
  std::vector<Held> held;
  for (size_t left = bytes; left > 0;) {
    Held h;
    h.size = gpu::RoundUp(left < allocation ? left : allocation, granularity);
    h.seed = 0x15000 + held.size();
    h.pattern_bytes = static_cast<size_t>(static_cast<double>(h.size) * (1.0 - zero_fraction)) / 8 * 8;
    h.handle = gpu::CreateAllocation(h.size, prop);
    h.va = gpu::MapWithAccess(h.handle, h.size, 0);
    if (h.pattern_bytes > 0) gpu::FillPattern(h.va, h.pattern_bytes, h.seed);
    if (h.pattern_bytes < h.size) CU(cuMemsetD8(h.va + h.pattern_bytes, 0, h.size - h.pattern_bytes));
    held.push_back(h);
    left -= left < allocation ? left : allocation;
  }
  CU(cuCtxSynchronize());
  std::printf("@@READY %d %zu bytes in %zu allocations, %s, %.2f zero\n", static_cast<int>(getpid()),
              bytes, held.size(), shared ? "POSIX-capable" : "private", zero_fraction);
  std::fflush(stdout);
  std::string command;
  while (std::getline(std::cin, command) && command != "quit") {
    if (command != "verify") continue;
    bool ok = true;
    for (const Held& h : held) {
      if (h.pattern_bytes > 0) ok = gpu::VerifyPattern(h.va, h.pattern_bytes, h.seed, "held allocation") && ok;
      ok = AllZero(h.va + h.pattern_bytes, h.size - h.pattern_bytes) && ok;
    }
    std::printf("@@VERIFY %s\n", ok ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  for (const Held& h : held) {
    gpu::UnmapAndFree(h.va, h.size);
    CU(cuMemRelease(h.handle));
  }
  std::printf("@@DONE\n");
  return 0;
}
