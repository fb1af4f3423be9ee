// Device queries: cuDeviceGet/GetCount/GetName/GetUuid(_v2)/GetAttribute/TotalMem/CanAccessPeer.
// The devices model an H200-class GPU (compute capability 9.0) that supports VMM, POSIX
// descriptor export and multicast (DRIVER-FACTS F9: MULTICAST_SUPPORTED = 1).
#include "devices.h"

#include "api_call.h"
#include "config.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace simcuda::devices {
namespace {

// The GPUs CUDA_VISIBLE_DEVICES selects, in its order (DRIVER-FACTS F13, measured on 2x
// H200, driver 580): entries are separated by ',' and may have spaces around them; the first
// entry decides whether the list names GPUs by index or by UUID ("GPU-" + a full UUID or a
// prefix that names one GPU); the list ends at the first entry that names no GPU (an index
// out of range, "-1", an unknown UUID, an entry of the other kind); a GPU listed twice makes
// cuInit fail CUDA_ERROR_INVALID_DEVICE; no GPU at all, CUDA_ERROR_NO_DEVICE. Unset: every
// GPU in index order. CUDA_DEVICE_ORDER changes nothing: the simulated GPUs are identical,
// so FASTEST_FIRST and PCI_BUS_ID order them alike, as on the measured machine.
struct Visible {
  std::array<int, kMaxDevices> physical{};
  int count = 0;
  CUresult status = CUDA_SUCCESS;
};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The physical GPU one entry names, if any.
std::optional<int> named_gpu(std::string_view entry, bool by_uuid) {
  const int gpus = config().device_count;
  if (by_uuid) {
    if (entry.substr(0, 4) != "GPU-") return std::nullopt;
    std::optional<int> found;
    for (int p = 0; p < gpus; ++p) {
      if (uuid_text(physical_uuid(p)).compare(0, entry.size(), entry) != 0) continue;
      if (found) return std::nullopt;  // a prefix of two UUIDs names no GPU
      found = p;
    }
    return found;
  }
  if (entry.empty() || entry.size() > 3) return std::nullopt;
  for (char c : entry)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  const int index = std::atoi(std::string(entry).c_str());
  return index < gpus ? std::optional<int>(index) : std::nullopt;
}

Visible parse_visible(const char *text) {
  Visible v;
  if (text == nullptr) {
    v.count = config().device_count;
    for (int p = 0; p < v.count; ++p) v.physical[static_cast<size_t>(p)] = p;
  } else {
    std::string_view rest(text);
    bool by_uuid = false;
    for (bool first = true; v.count < kMaxDevices; first = false) {
      const size_t comma = rest.find(',');
      const std::string_view entry = trimmed(rest.substr(0, comma));
      if (first) by_uuid = entry.substr(0, 4) == "GPU-";
      const std::optional<int> gpu = named_gpu(entry, by_uuid);
      if (!gpu) break;
      for (int i = 0; i < v.count; ++i) {
        if (v.physical[static_cast<size_t>(i)] == *gpu) v.status = CUDA_ERROR_INVALID_DEVICE;
      }
      v.physical[static_cast<size_t>(v.count++)] = *gpu;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (v.status == CUDA_SUCCESS && v.count == 0) v.status = CUDA_ERROR_NO_DEVICE;
  return v;
}

// Ordinal -> physical GPU, starting as CUDA_VISIBLE_DEVICES says. Atomic: driver calls read
// it while the checkpoint service thread replaces it at restore (the gate keeps them apart,
// but nothing here relies on that).
struct Table {
  std::array<std::atomic<int>, kMaxDevices> slots;
  int count;
  CUresult status;
  Table() {
    const Visible v = parse_visible(std::getenv("CUDA_VISIBLE_DEVICES"));
    for (size_t d = 0; d < slots.size(); ++d) slots[d].store(v.physical[d]);
    count = v.count;
    status = v.status;
  }
};

Table &visible_table() {
  static Table t;
  return t;
}

std::array<std::atomic<int>, kMaxDevices> &table() { return visible_table().slots; }

}  // namespace

int count() { return visible_table().status == CUDA_SUCCESS ? visible_table().count : 0; }

int physical_count() { return config().device_count; }

CUresult visible_status() { return visible_table().status; }

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

std::string uuid_text(const CUuuid &uuid) {
  const auto *b = reinterpret_cast<const unsigned char *>(uuid.bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

std::optional<int> find_physical(const CUuuid &wanted) {
  for (int p = 0; p < physical_count(); ++p) {
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
