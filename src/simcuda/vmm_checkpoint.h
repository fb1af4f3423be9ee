// What a native checkpoint and restore do to this process's device memory (called by the
// checkpoint service while the process is locked, so no driver call is in flight).
#pragma once

#include "cuda_api.h"

namespace simcuda::vmm {

/// Copies every allocation's bytes into private host memory and releases it: descriptors
/// closed, mapped VAs left as PROT_NONE reservations, the ledger shows the bytes freed.
/// Handles, mappings and access stay recorded for the restore. Never called while the process
/// holds a multicast object (the checkpoint service refuses first: checkpoint_service.h).
CUresult checkpoint_all();

/// Recreates every allocation at its VAs with its saved bytes and access, on the same
/// ordinal; the caller set the ordinal -> physical table first, so a restore onto other GPUs
/// puts the memory (and its ledger entry) on the GPU now behind that ordinal (F7). Each is
/// then marked as having been through a native cycle, so it can never be exported again
/// (DRIVER-FACTS F3, F4). CUDA_ERROR_NOT_SUPPORTED, and nothing restored, when the process
/// held an imported allocation at checkpoint (F5);
/// CUDA_ERROR_INVALID_VALUE when one of them was opened from a legacy IPC handle (F11).
CUresult restore_all();

}  // namespace simcuda::vmm
