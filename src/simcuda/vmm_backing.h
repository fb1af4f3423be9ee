// The host-memory mechanics under the VMM state (vmm.h): memfds named after their allocation,
// backing windows, VA reservations, and mappings duplicated from a window into a reservation.
#pragma once

#include "vmm.h"

namespace simcuda::vmm::backing {

/// A fresh allocation id, unique across processes.
uint64_t new_id();
/// Gives `a` (id, prop, size set) a new memfd named after it and a backing window; keeps the
/// descriptor in a.fd when `keep_fd` (for export), closes it otherwise.
/// CUDA_ERROR_OUT_OF_MEMORY when the host cannot provide it.
CUresult create(Allocation &a, bool keep_fd);
/// Unmaps the backing window and closes the descriptor, if any.
void discard(Allocation &a);
/// Reads an exported descriptor's allocation (id, prop, size) from its memfd name; false when
/// `fd` is not a simcuda allocation.
bool describe(int fd, Allocation &a);
/// Maps the allocation behind `fd` as a's backing window without keeping `fd`.
bool attach(Allocation &a, int fd);
/// A new descriptor (close-on-exec) for a's memfd; -1 on failure.
int duplicate_fd(const Allocation &a);
/// Makes [va, va+size) show a's bytes from `offset` with protection `prot`.
bool place(const Allocation &a, size_t offset, CUdeviceptr va, size_t size, int prot);
/// Turns [va, va+size) back into an inaccessible reservation.
void make_reserved(CUdeviceptr va, size_t size);
/// Reserves `size` bytes aligned to `alignment` (at `hint` when free); 0 when out of VA.
CUdeviceptr reserve_range(size_t size, size_t alignment, CUdeviceptr hint);
/// The page protection that access flags grant (PROT_READ|PROT_WRITE, PROT_READ, PROT_NONE).
int protection(const AccessFlags &access);
/// Applies protection(m.access) to the mapping.
void protect(const Mapping &m);

}  // namespace simcuda::vmm::backing
