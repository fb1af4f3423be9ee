// gpu_multicast_forward (GPU, multicast): the shim forwards the multicast entry
// points unchanged. NEVER run on this project's machines: cuMulticastCreate can take the
// shared host's GPUs out of service (DRIVER-FACTS F9). The program refuses to do anything
// (exit 77, "skipped") unless CUSNAP_ALLOW_MULTICAST=1; run_all.sh skips it the same way.
//
// With two GPUs: one multicast object of one granule, both devices added, one device
// allocation per GPU bound to it, the object mapped and unmapped, everything released.
#include <cstdlib>
#include <cstring>

#include "gpu/gpu_check.h"
#include "gpu/gpu_vmm.h"

int main() {
  gpu::SetRole("multicast");
  const char* allow = std::getenv("CUSNAP_ALLOW_MULTICAST");
  if (allow == nullptr || std::strcmp(allow, "1") != 0) {
    gpu::Log("SKIP: multicast objects are never created unless CUSNAP_ALLOW_MULTICAST=1 (DRIVER-FACTS F9)");
    return 77;
  }
  gpu::UsePrimaryContext(0);
  if (gpu::DeviceCount() < 2) gpu::Fail("needs two GPUs");
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  CU(cuMulticastGetGranularity(&granularity, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED));
  const size_t bytes = gpu::RoundUp(granularity, gpu::Granularity(0));
  prop.size = bytes;
  CUmemGenericAllocationHandle team = 0;
  CU(cuMulticastCreate(&team, &prop));
  for (int device = 0; device < 2; ++device) CU(cuMulticastAddDevice(team, device));
  CUmemGenericAllocationHandle members[2] = {};
  for (int device = 0; device < 2; ++device) {
    gpu::UsePrimaryContext(device);
    members[device] = gpu::CreatePosixAllocation(bytes, device);
    CU(cuMulticastBindMem(team, 0, members[device], 0, bytes, 0));
  }
  gpu::UsePrimaryContext(0);
  const CUdeviceptr va = gpu::MapWithAccess(team, bytes, 0);
  gpu::Log("multicast object of %zu bytes bound on both GPUs, mapped at VA 0x%llx", bytes,
           static_cast<unsigned long long>(va));
  gpu::UnmapAndFree(va, bytes);
  for (int device = 0; device < 2; ++device) {
    CU(cuMulticastUnbind(team, device, 0, bytes));
    CU(cuMemRelease(members[device]));
  }
  CU(cuMemRelease(team));
  gpu::Log("PASS");
  return 0;
}
