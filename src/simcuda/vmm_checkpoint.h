// What a native checkpoint and restore do to this process's device memory (called by the
// checkpoint service while the process is locked, so no driver call is in flight).
#pragma once

#include "config.h"
#include "cuda_api.h"

#include <array>

namespace simcuda::vmm {

/// Copies every allocation's bytes into private host memory and releases it: descriptors
/// closed, mapped VAs left as PROT_NONE reservations, the ledger shows the bytes freed.
/// Handles, mappings and access stay recorded for the restore. Never called while the process
/// holds a multicast object (the checkpoint service refuses first: checkpoint_service.h).
CUresult checkpoint_all();

/// Recreates every allocation at its VAs with its saved bytes and access, on
/// device_map[old device]; each is then marked as having been through a native cycle, so it
/// can never be exported again (DRIVER-FACTS F3, F4, F7). CUDA_ERROR_NOT_SUPPORTED, and nothing
/// restored, when the process held an imported allocation at checkpoint (F5).
CUresult restore_all(const std::array<int, kMaxDevices> &device_map);

}  // namespace simcuda::vmm
