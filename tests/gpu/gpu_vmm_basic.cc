// gpu_vmm_basic (GPU): a plain CUDA driver-API program (no kernels) that must
// print the same RESULT lines with and without the shim preloaded. On every GPU it creates
// a POSIX-capable VMM allocation, maps it, grants access, writes and reads patterns, asks
// for its address range, properties and handle by address, copies to and from cuMemAlloc
// memory and memsets a sub-range; with two GPUs it maps GPU 0's allocation for both and
// copies from GPU 1; where the device supports it, a HOST_NUMA allocation (what NCCL makes).
//
// stdout: "RESULT ..." lines (compared by run_all.sh between the two runs) and
// "[vmm <pid>] ..." log lines (not compared: they name pids, handles and VAs).
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "gpu/gpu_check.h"
#include "gpu/gpu_pattern.h"
#include "gpu/gpu_vmm.h"

namespace {

constexpr size_t kVmmBytes = size_t{64} << 20;
constexpr size_t kLinearBytes = size_t{32} << 20;

void Result(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Result(const char* fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  std::printf("RESULT %s\n", line);
  std::fflush(stdout);
}

int Attribute(CUdevice_attribute attribute, int device) {
  int value = 0;
  CU(cuDeviceGetAttribute(&value, attribute, device));
  return value;
}

bool g_failed = false;

// The word a RESULT line shows for a check; a failed check makes the program exit 1.
const char* Verdict(bool ok, const char* good, const char* bad) {
  if (!ok) g_failed = true;
  return ok ? good : bad;
}

unsigned long long Hex(uint64_t value) { return static_cast<unsigned long long>(value); }

void DeviceChecks(int device) {
  gpu::UsePrimaryContext(device);
  char name[256] = {};
  CU(cuDeviceGetName(name, sizeof name, device));
  Result("gpu %d: %s, VMM %d, POSIX descriptors %d", device, name,
         Attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
         Attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device));
  const size_t granularity = gpu::Granularity(device);
  Result("gpu %d: granularity %zu bytes", device, granularity);

  // A POSIX-capable allocation: the kind the shim tracks.
  const size_t bytes = gpu::RoundUp(kVmmBytes, granularity);
  const CUmemGenericAllocationHandle handle = gpu::CreatePosixAllocation(bytes, device);
  const CUdeviceptr va = gpu::MapWithAccess(handle, bytes, device);
  gpu::Log("gpu %d: allocation handle 0x%llx mapped at VA 0x%llx", device, Hex(handle), Hex(va));
  const uint64_t seed = 0x5EED0000ull + static_cast<uint64_t>(device);
  gpu::FillPattern(va, bytes, seed);
  const bool pattern_ok = gpu::VerifyPattern(va, bytes, seed, "VMM allocation");
  Result("gpu %d: VMM %zu bytes pattern %s, digest 0x%016llx", device, bytes,
         Verdict(pattern_ok, "ok", "WRONG"), Hex(gpu::DeviceDigest(va, bytes)));

  CUdeviceptr base = 0;
  size_t range = 0;
  CU(cuMemGetAddressRange(&base, &range, va + 12345));
  Result("gpu %d: address range of an inner VA: %s", device,
         Verdict(base == va && range == bytes, "base and size of the mapping", "WRONG"));

  CUmemGenericAllocationHandle retained = 0;
  CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + (size_t{1} << 20))));
  CUmemAllocationProp prop{};
  CU(cuMemGetAllocationPropertiesFromHandle(&prop, retained));
  gpu::Log("gpu %d: handle retained by address 0x%llx (%s the created one)", device, Hex(retained),
           retained == handle ? "same as" : "differs from");
  Result("gpu %d: properties by address: type %d, location %d/%d, POSIX requested %s", device,
         static_cast<int>(prop.type), static_cast<int>(prop.location.type), prop.location.id,
         (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ? "yes" : "no");
  CU(cuMemRelease(retained));

  // cuMemAlloc memory next to VMM memory: copies both ways and a memset of a sub-range.
  CUdeviceptr linear = 0;
  CU(cuMemAlloc(&linear, kLinearBytes));
  CU(cuMemsetD8(linear, 0x5A, kLinearBytes));
  CU(cuMemcpyDtoD(linear, va, kLinearBytes));
  const uint64_t linear_digest = gpu::DeviceDigest(linear, kLinearBytes);
  Result("gpu %d: cuMemAlloc copy of the first %zu bytes %s", device, kLinearBytes,
         Verdict(linear_digest == gpu::DeviceDigest(va, kLinearBytes), "matches", "DIFFERS"));
  CU(cuMemsetD8(va + (size_t{3} << 20), 0xC3, size_t{1} << 20));
  CU(cuMemcpyDtoD(va + (size_t{8} << 20), linear, size_t{4} << 20));
  Result("gpu %d: after memset + copy back, digest 0x%016llx", device, Hex(gpu::DeviceDigest(va, bytes)));
  CU(cuMemFree(linear));

  const int fd = gpu::ExportPosix(handle);
  gpu::Log("gpu %d: exported as descriptor %d", device, fd);
  close(fd);
  Result("gpu %d: export to a POSIX descriptor ok", device);

  gpu::UnmapAndFree(va, bytes);
  CU(cuMemRelease(handle));
}

// GPU 0's memory mapped once with access for both GPUs, read from GPU 1's context.
void CrossDeviceCheck() {
  int can_access = 0;
  CUdevice d0 = 0;
  CUdevice d1 = 0;
  CU(cuDeviceGet(&d0, 0));
  CU(cuDeviceGet(&d1, 1));
  CU(cuDeviceCanAccessPeer(&can_access, d1, d0));
  Result("gpu 1 can access gpu 0: %d", can_access);
  if (!can_access) return;

  gpu::UsePrimaryContext(0);
  const size_t bytes = gpu::RoundUp(kVmmBytes, gpu::Granularity(0));
  const CUmemGenericAllocationHandle handle = gpu::CreatePosixAllocation(bytes, 0);
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, bytes, 0, 0, 0));
  CU(cuMemMap(va, bytes, 0, handle, 0));
  CUmemAccessDesc access[2] = {};
  for (int d = 0; d < 2; ++d) {
    access[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[d].location.id = d;
    access[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CU(cuMemSetAccess(va, bytes, access, 2));
  gpu::FillPattern(va, bytes, 0xC0055ull);

  gpu::UsePrimaryContext(1);
  unsigned long long flags = 0;
  CUmemLocation gpu1{};
  gpu1.type = CU_MEM_LOCATION_TYPE_DEVICE;
  gpu1.id = 1;
  CU(cuMemGetAccess(&flags, &gpu1, va));
  CUdeviceptr linear = 0;
  CU(cuMemAlloc(&linear, bytes));
  CU(cuMemcpyDtoD(linear, va, bytes));
  Result("gpu 1 access flags on gpu 0's allocation: %llu; copy into gpu 1 memory: pattern %s",
         flags, Verdict(gpu::VerifyPattern(linear, bytes, 0xC0055ull, "gpu 0 allocation copied by gpu 1"), "ok", "WRONG"));
  CU(cuMemFree(linear));

  gpu::UsePrimaryContext(0);
  gpu::UnmapAndFree(va, bytes);
  CU(cuMemRelease(handle));
}

// A POSIX-capable HOST_NUMA allocation (location type 3), mapped for GPU 0.
void HostNumaCheck() {
  gpu::UsePrimaryContext(0);
  const int numa = gpu::HostNumaNode(0);
  if (numa < 0) {
    Result("host NUMA VMM: not supported by gpu 0");
    return;
  }
  const CUmemAllocationProp prop = gpu::PosixProp(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa);
  const size_t bytes = gpu::RoundUp(size_t{16} << 20, gpu::Granularity(prop));
  const CUmemGenericAllocationHandle handle = gpu::CreateAllocation(bytes, prop);
  const CUdeviceptr va = gpu::MapWithAccess(handle, bytes, 0);
  gpu::Log("host NUMA node %d: handle 0x%llx at VA 0x%llx", prop.location.id, Hex(handle), Hex(va));
  gpu::FillPattern(va, bytes, 0x4057ull);
  Result("host NUMA VMM %zu bytes: pattern %s", bytes,
         Verdict(gpu::VerifyPattern(va, bytes, 0x4057ull, "HOST_NUMA allocation"), "ok", "WRONG"));
  gpu::UnmapAndFree(va, bytes);
  CU(cuMemRelease(handle));
}

}  // namespace

int main() {
  gpu::SetRole("vmm");
  gpu::Log("shim %s", gpu::ShimLoaded() ? "loaded" : "not loaded");
  CU(cuInit(0));
  const int count = gpu::DeviceCount();
  Result("%d GPU(s)", count);
  for (int device = 0; device < count; ++device) DeviceChecks(device);
  if (count >= 2) CrossDeviceCheck();
  HostNumaCheck();
  Result("done");
  if (g_failed) gpu::Fail("a check above printed WRONG or DIFFERS");
  return 0;
}
