// The region check shared by the GPU sharing programs (gpu_region.h).
#include "gpu/gpu_region.h"

#include "gpu/gpu_check.h"
#include "gpu/gpu_pattern.h"
#include "gpu/gpu_vmm.h"

namespace gpu {
namespace {

unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }

}  // namespace

CUmemLocation LocationOf(CUmemGenericAllocationHandle handle) {
  CUmemAllocationProp prop{};
  CU(cuMemGetAllocationPropertiesFromHandle(&prop, handle));
  return prop.location;
}

bool VerifyRegion(const Region& r, const char* when) {
  const std::string what = r.name + " " + when;
  bool ok = VerifyPattern(r.va, r.bytes, r.seed, what.c_str());
  CUdeviceptr base = 0;
  size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, r.va + r.bytes / 2));
  if (base != r.va || size != r.bytes) {
    Log("%s: address range of VA 0x%llx is [0x%llx, +%zu), expected [0x%llx, +%zu)", what.c_str(),
        U(r.va + r.bytes / 2), U(base), size, U(r.va), r.bytes);
    ok = false;
  }
  const CUmemLocation now = LocationOf(r.handle);
  if (now.type != r.location.type || now.id != r.location.id) {
    Log("%s: handle 0x%llx now reports location %d/%d, it was %d/%d", what.c_str(), U(r.handle),
        static_cast<int>(now.type), now.id, static_cast<int>(r.location.type), r.location.id);
    ok = false;
  }
  return ok;
}

void ReleaseRegion(const Region& r) {
  UnmapAndFree(r.va, r.bytes);
  CU(cuMemRelease(r.handle));
}

}  // namespace gpu
