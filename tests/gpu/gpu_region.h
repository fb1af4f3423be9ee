// One allocation as a GPU test program maps it, and the check both sharing programs
// (gpu_share_checkpoint, gpu_share_ring) run on it after a restore: every byte holds its
// pattern, the VA still belongs to a mapping of the same range, and the application's
// handle still names an allocation at the same location (logical handles survive
// checkpoint and restore).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpu {

/// An allocation mapped by this process: created here or imported.
struct Region {
  std::string name;
  CUmemGenericAllocationHandle handle = 0;  ///< as the application holds it
  CUdeviceptr va = 0;
  size_t bytes = 0;                         ///< mapped size (whole allocation)
  uint64_t seed = 0;                        ///< the pattern it should hold (gpu_pattern.h)
  CUmemLocation location{};                 ///< as the driver reported it when mapped here
};

/// The location the driver reports for `handle` (cuMemGetAllocationPropertiesFromHandle).
CUmemLocation LocationOf(CUmemGenericAllocationHandle handle);

/// Checks `r` (bytes, address range, handle location); logs each difference naming
/// `r.name` and `when`; true when everything holds.
bool VerifyRegion(const Region& r, const char* when);

/// Unmaps `r`, frees its VA range and releases its handle (the end of a test program).
void ReleaseRegion(const Region& r);

}  // namespace gpu
