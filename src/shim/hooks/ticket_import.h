// The two halves of sharing a tracked allocation (DESIGN.md, "Tickets"):
// cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR) on a logical handle returns a ticket,
// and cuMemImportFromShareableHandle of a ticket asks the creator's endpoint for a fresh raw
// descriptor, imports it and closes it at once. Hooks in vmm.cc call these after their
// argument checks. Descriptors that are not tickets are imported as they are and recorded as
// untracked imports here.
#pragma once

#include <cstdint>

#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

/// Exports tracked logical handle `handle` (an allocation's or, through the multicast table,
/// a multicast object's) as a ticket written to `shareable` (an int, on success only), for a
/// call of handle type `type` with `flags`. The creator exports the real POSIX descriptor
/// once, into the export cache, on the first call; an importer's ticket names the original
/// creator. Arguments other than (POSIX, 0) are first put to the driver with the real handle:
/// its error comes back as it is, and another type it accepts is CUDA_ERROR_NOT_SUPPORTED.
/// Returns CUDA_ERROR_INVALID_HANDLE for an unknown logical handle (the hook asks the driver
/// first), CUDA_ERROR_NOT_READY when the allocation has no real handle now (lifecycle in
/// progress), the driver's error when its export fails, and CUDA_ERROR_OPERATING_SYSTEM when
/// no ticket memfd could be made.
CUresult ExportTicket(uint64_t handle, void* shareable, CUmemAllocationHandleType type,
                      unsigned long long flags);

/// Imports POSIX descriptor `fd`. A ticket yields a logical handle (aliasing an allocation
/// this process already holds); anything else is imported as it is, returned raw and
/// counted as an untracked import. The application's `fd` is never closed. Errors:
/// CUDA_ERROR_INVALID_HANDLE for a malformed ticket, a creator that is gone (its pid now
/// names another process) or an allocation it no longer exports; CUDA_ERROR_OPERATING_SYSTEM
/// when the creator's endpoint cannot be reached; the driver's error when its import fails.
/// A multicast ticket yields a multicast logical handle (multicast_table.h).
CUresult ImportShareable(CUmemGenericAllocationHandle* handle, int fd);

/// Imports tracked allocation `id` from its creator, proving `capability` (from a ticket or a
/// legacy IPC handle; capabilities.h), or aliases the one this process holds: a logical
/// handle with one reference in `*handle`. Errors as ImportShareable's for a ticket.
CUresult ImportAllocation(const proto::ObjectId& id, const proto::Capability& capability,
                          CUmemGenericAllocationHandle* handle);

/// The creator's half of sharing pinned allocation `pin` (a ticket or a legacy IPC handle):
/// its real POSIX descriptor exported once into the export cache (a creator only), the
/// allocation marked shared so restore exports it again. The driver's error when its
/// export fails.
CUresult CacheCreatorExport(const Pinned& pin);

/// Records `real`, just returned by the driver's import of a shareable handle of type `type`
/// that is not a ticket, as an untracked import (untracked_imports.h), with the properties
/// the driver reports for it now (cuMemGetAllocationPropertiesFromHandle: its location names
/// it in the checkpoint's refusal). Every non-ticket import goes through here.
void RecordUntrackedImport(CUmemGenericAllocationHandle real, CUmemAllocationHandleType type);

}  // namespace cusnap::shim
