// gpu_meminfo: memory in use on every GPU, one line each ("gpu <i> used_mib <n> total_mib
// <m>"), from cuMemGetInfo in a context of its own. The fallback of test_share_checkpoint.py
// where nvidia-smi is missing; its own context adds a constant to every reading.
#include <cstdio>

#include "gpu/gpu_check.h"

int main() {
  gpu::SetRole("meminfo");
  CU(cuInit(0));
  const int count = gpu::DeviceCount();
  for (int device = 0; device < count; ++device) {
    gpu::UsePrimaryContext(device);
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    CU(cuMemGetInfo(&free_bytes, &total_bytes));
    std::printf("gpu %d used_mib %zu total_mib %zu\n", device, (total_bytes - free_bytes) >> 20,
                total_bytes >> 20);
    CUdevice handle = 0;
    CU(cuDeviceGet(&handle, device));
    CU(cuDevicePrimaryCtxRelease(handle));
  }
  return 0;
}
