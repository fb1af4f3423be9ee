// Known byte patterns in device memory, written and checked through host staging copies
// (no kernels). Word i (8 bytes at byte offset 8*i of a region) of the pattern with `seed`
// is a hash of (seed, i), so every byte of every region is distinct from its neighbours
// and from other seeds: a misplaced page, a stale copy or a zeroed range all show up.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace gpu {

/// The pattern's 64-bit word at word index `index` for `seed`.
uint64_t PatternWord(uint64_t seed, uint64_t index);

/// Writes the pattern `seed` into [va, va + bytes) of the current context (bytes: a multiple
/// of 8). Synchronous (cuMemcpyHtoD through a 64 MiB host buffer).
void FillPattern(CUdeviceptr va, size_t bytes, uint64_t seed);

/// Reads [va, va + bytes) back and compares every byte with the pattern `seed`. Logs the
/// result naming `what` (first differing byte offset, expected and found values, number of
/// differing words); returns true when every byte matches.
bool VerifyPattern(CUdeviceptr va, size_t bytes, uint64_t seed, const char* what);

/// FNV-1a-style 64-bit digest of [va, va + bytes) (bytes: a multiple of 8), for output that
/// must be identical with and without the shim.
uint64_t DeviceDigest(CUdeviceptr va, size_t bytes);

}  // namespace gpu
