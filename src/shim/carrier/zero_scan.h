// The zero-chunk scan: which chunks of a device allocation hold only zero bytes, found on
// the device itself (reading at device memory speed) so those chunks are neither copied
// nor kept in host memory; restore recreates them with a memset (native checkpoint copies
// empty KV-cache pools byte for byte; the carrier must not). The kernel
// is a PTX string loaded with cuModuleLoadData: no compiler is needed at run time, and the
// simulated driver runs the same calls (src/simcuda/kernels.cc, chunk_nonzero_u64).
#pragma once

#include <cstddef>
#include <vector>

#include "shim/driver/cuda_abi.h"
#include "shim/driver/driver_api.h"

namespace cusnap::shim {

/// The scan kernel per context, loaded at first use and kept (modules live with their
/// context, through native checkpoint and restore). Not thread-safe: the carrier's lock
/// guards it.
class ZeroScanner {
 public:
  explicit ZeroScanner(const DriverApi& api) : api_(api) {}

  /// Enqueues on `stream` (its context current and equal to `context`) the scan of
  /// [src, src + bytes) in chunks of `chunk` bytes: flags[c] (u32 device words, zeroed by
  /// the caller) becomes 1 for each chunk holding a non-zero byte. `bytes` is a multiple
  /// of 8. CUDA_ERROR_NOT_SUPPORTED when the kernel cannot be loaded in this context (logged
  /// once; the caller then treats every chunk as non-zero); else the launch's result.
  CUresult Enqueue(CUcontext context, CUstream stream, CUdeviceptr src, size_t bytes, size_t chunk,
                   CUdeviceptr flags);

 private:
  struct Loaded {
    CUcontext context = nullptr;
    CUfunction function = nullptr;  // nullptr: loading failed in this context
  };
  CUfunction FunctionFor(CUcontext context);

  const DriverApi& api_;
  std::vector<Loaded> loaded_;
};

/// The PTX text of the scan kernel (entry chunk_nonzero_u64), for tests and the GPU bench.
const char* ZeroScanPtx();

}  // namespace cusnap::shim
