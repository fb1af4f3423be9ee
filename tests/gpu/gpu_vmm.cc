// VMM building blocks (gpu_vmm.h).
#include "gpu/gpu_vmm.h"

#include <cstdint>

#include "gpu/gpu_check.h"

namespace gpu {
CUmemAllocationProp PosixProp(CUmemLocationType type, int id) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

size_t Granularity(const CUmemAllocationProp& prop) {
  size_t granularity = 0;
  CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (granularity == 0) {
    Fail("location %d/%d reports allocation granularity 0", static_cast<int>(prop.location.type),
         prop.location.id);
  }
  return granularity;
}

size_t Granularity(int device) { return Granularity(PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, device)); }

int HostNumaNode(int device) {
  int supported = 0;
  CU(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                          device));
  if (!supported) return -1;
  int node = 0;
  CU(cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, device));
  return node < 0 ? 0 : node;
}

CUmemGenericAllocationHandle CreateAllocation(size_t bytes, const CUmemAllocationProp& prop) {
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemCreate(&handle, bytes, &prop, 0));
  return handle;
}

size_t RoundUp(size_t bytes, size_t granularity) {
  return (bytes + granularity - 1) / granularity * granularity;
}

CUmemGenericAllocationHandle CreatePosixAllocation(size_t bytes, int device) {
  return CreateAllocation(bytes, PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, device));
}

CUdeviceptr MapWithAccess(CUmemGenericAllocationHandle handle, size_t bytes, int access_device) {
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
  CU(cuMemMap(va, bytes, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = access_device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, bytes, &access, 1));
  return va;
}

void UnmapAndFree(CUdeviceptr va, size_t bytes) {
  CU(cuMemUnmap(va, bytes));
  CU(cuMemAddressFree(va, bytes));
}

int ExportPosix(CUmemGenericAllocationHandle handle) {
  int fd = -1;
  CU(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (fd < 0) Fail("cuMemExportToShareableHandle succeeded but returned descriptor %d", fd);
  return fd;
}

CUmemGenericAllocationHandle ImportPosix(int fd) {
  CUmemGenericAllocationHandle handle = 0;
  // The driver API takes a POSIX descriptor by value, cast to a pointer.
  CU(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  return handle;
}

}  // namespace gpu
