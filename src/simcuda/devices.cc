// Device queries: cuDeviceGet/GetCount/GetName/GetUuid(_v2)/GetAttribute/TotalMem/CanAccessPeer.
// The devices model an H200-class GPU (compute capability 9.0) that supports VMM, POSIX
// descriptor export and multicast (DRIVER-FACTS F9: MULTICAST_SUPPORTED = 1).
#include "devices.h"

#include "api_call.h"
#include "config.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace simcuda::devices {
namespace {

// Ordinal -> physical GPU. Atomic: driver calls read it while the checkpoint service thread
// replaces it at restore (the gate keeps them apart, but nothing here relies on that).
struct Table {
  std::array<std::atomic<int>, kMaxDevices> slots;
  Table() {
    for (size_t d = 0; d < slots.size(); ++d) slots[d].store(static_cast<int>(d));  // identity
  }
};

std::array<std::atomic<int>, kMaxDevices> &table() {
  static Table t;
  return t.slots;
}

}  // namespace

int count() { return config().device_count; }

bool valid(CUdevice device) { return device >= 0 && device < count(); }

int physical(int ordinal) { return table()[static_cast<size_t>(ordinal)].load(); }

std::optional<int> ordinal_of(int physical_gpu) {
  for (int d = 0; d < count(); ++d)
    if (physical(d) == physical_gpu) return d;
  return std::nullopt;
}

CUuuid physical_uuid(int physical_gpu) {
  // "SIMCUDA-GPU-" + 2 digits + 2 bytes: recognisable in logs and stable across processes.
  CUuuid u{};
  char text[17];
  std::snprintf(text, sizeof text, "SIMCUDA-GPU-%02d..", physical_gpu);
  std::memcpy(u.bytes, text, sizeof u.bytes);
  return u;
}

CUuuid uuid(int ordinal) { return physical_uuid(physical(ordinal)); }

std::optional<int> find_physical(const CUuuid &wanted) {
  for (int p = 0; p < count(); ++p) {
    CUuuid u = physical_uuid(p);
    if (std::memcmp(u.bytes, wanted.bytes, sizeof u.bytes) == 0) return p;
  }
  return std::nullopt;
}

PhysicalTable physical_table() {
  PhysicalTable out{};
  for (size_t d = 0; d < out.size(); ++d) out[d] = table()[d].load();
  return out;
}

void set_physical_table(const PhysicalTable &t) {
  for (size_t d = 0; d < t.size(); ++d) table()[d].store(t[d]);
}

namespace {

int attribute_value(CUdevice_attribute attribute) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: return 1;
    // An H200 on an x86 host: its memory is no NUMA node (NUMA_CONFIG NONE, NUMA_ID -1; only
    // coherent Grace Hopper memory is one), the nearest host node is 0, and HOST_NUMA VMM
    // allocations and pools are supported on a single node (cuda.h, CUdevice_attribute).
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG: return CU_DEVICE_NUMA_CONFIG_NONE;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
  }
}

}  // namespace
}  // namespace simcuda::devices

using simcuda::devices::valid;

extern "C" {

CUresult cuDeviceGetCount(int *count) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGetCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = simcuda::devices::count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGet");
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGetName");
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // Named after the physical GPU: the name follows it across a restore onto other GPUs.
  std::snprintf(name, static_cast<size_t>(len), "SimCUDA H200 (simulated device %d)",
                simcuda::devices::physical(dev));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGetUuid");
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = simcuda::devices::uuid(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGetUuid");
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = simcuda::devices::uuid(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceGetAttribute");
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = simcuda::devices::attribute_value(attrib);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceTotalMem");
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = simcuda::config().device_memory_bytes;
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
  SIMCUDA_CALL_INITIALIZED("cuDeviceCanAccessPeer");
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid(dev) || !valid(peerDev)) return CUDA_ERROR_INVALID_DEVICE;
  *canAccessPeer = dev != peerDev ? 1 : 0;
  return CUDA_SUCCESS;
}

}  // extern "C"
