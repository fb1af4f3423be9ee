// The memory ledger: which allocations exist on which device, across every process of this
// user, so cuMemGetInfo shows memory taken and released by other processes (as nvidia-smi and
// cuMemGetInfo do on a real GPU). A small file in SIMCUDA_DIR, mapped shared; each process
// owns one slot listing the allocations it holds (created or imported), and an allocation held
// by several processes counts once. Slots of processes that died are ignored and reused.
#pragma once

#include <cstddef>
#include <cstdint>

namespace simcuda::ledger {

/// Records that this process holds allocation `uid` of `bytes` bytes on `device`.
void add(uint64_t uid, int device, size_t bytes);
/// Records that this process no longer holds allocation `uid`.
void remove(uint64_t uid);
/// Bytes in use on `device` by every live process (each allocation counted once).
size_t bytes_in_use(int device);
/// After fork, in the child: the parent's slot is not the child's (claims its own on use).
void forget_after_fork();

}  // namespace simcuda::ledger
