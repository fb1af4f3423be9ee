// This process's GPUs by UUID (DESIGN.md, "GPU identity"): a GPU is its UUID; the process
// names it by an ordinal of its own (its driver applies CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER), so the ordinals the tables record mean something only together with
// this list. The coordinator gets it with every INSPECT and translates the records' ordinals
// through it (never through its own numbering).
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "shim/driver/driver_api.h"

namespace cusnap::shim {

/// The UUID of each device `api`'s driver lets this process see, index = ordinal, as
/// FormatGpuUuid writes them (cuDeviceGetCount, cuDeviceGetUuid_v2). Empty when the driver
/// is not initialised here or answers an error (a process that never used CUDA).
std::vector<std::string> VisibleGpuUuids(const DriverApi& api);

/// VisibleGpuUuids joined by ',' (InspectReply::device_uuids), asked of the driver when
/// `may_call_driver`, else the last answer (between the native lock and unlock every driver
/// call blocks: a RELEASED shim answers INSPECT without one). Thread-safe.
std::string JoinedGpuUuids(const DriverApi& api, bool may_call_driver);

/// After a native restore with device map `pairs` (StepRequest::device_map: "GPU-a=GPU-b,..."):
/// each ordinal of this process must name the GPU its GPU before the restore (the list the
/// last INSPECT before the checkpoint read) was moved to, as the driver does (DRIVER-FACTS
/// F7b: ordinals kept, the GPU behind them changed): the steps rebuild on the recorded
/// ordinals. Error (CUDA_ERROR_INVALID_DEVICE) naming the ordinal and the GPUs otherwise, before
/// anything is created on a wrong GPU. Nothing to check when no list was read before.
Status CheckDevicesAfterMove(const DriverApi& api, const std::string& pairs);

}  // namespace cusnap::shim
