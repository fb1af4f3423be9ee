// The simulated devices: SIMCUDA_DEVICE_COUNT physical GPUs, identical but for their UUID.
// A process names the GPUs it sees by ordinal: CUDA_VISIBLE_DEVICES chooses which and in
// what order (DRIVER-FACTS F13); unset, ordinal N starts as physical GPU N. A restore onto
// other GPUs keeps the process's ordinals and changes the physical GPU behind each (F7,
// F7b), so every query by ordinal (UUID, name, memory accounting) goes through this
// process's ordinal -> physical table.
#pragma once

#include "config.h"
#include "cuda_api.h"

#include <array>
#include <optional>
#include <string>

namespace simcuda::devices {

/// Number of devices this process sees (CUDA_VISIBLE_DEVICES applied; what cuDeviceGetCount
/// answers).
int count();
/// Number of physical GPUs of the simulated machine (config().device_count).
int physical_count();
/// What cuInit answers for this process's CUDA_VISIBLE_DEVICES (DRIVER-FACTS F13):
/// CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE when no entry names a GPU (empty, "-1", an unknown
/// first entry, no GPUs at all), CUDA_ERROR_INVALID_DEVICE when a GPU is listed twice.
CUresult visible_status();
/// True when `device` is an ordinal in [0, count()).
bool valid(CUdevice device);
/// The physical GPU behind this process's `ordinal` (a valid ordinal).
int physical(int ordinal);
/// This process's ordinal for physical GPU `physical`, if it sees it.
std::optional<int> ordinal_of(int physical);
/// The UUID of physical GPU `physical`: the same in every process (restore device maps name
/// GPUs by it).
CUuuid physical_uuid(int physical);
/// The UUID of the GPU behind this process's `ordinal` (what cuDeviceGetUuid returns).
CUuuid uuid(int ordinal);
/// "GPU-" + 8-4-4-4-12 lowercase hex of `uuid`, as nvidia-smi and CUDA_VISIBLE_DEVICES write it.
std::string uuid_text(const CUuuid &uuid);
/// The physical GPU with this UUID, if any.
std::optional<int> find_physical(const CUuuid &uuid);

/// This process's ordinal -> physical GPU table (index = ordinal).
using PhysicalTable = std::array<int, kMaxDevices>;
/// The current table.
PhysicalTable physical_table();
/// Replaces the table (the checkpoint service, at restore, while the process is locked).
void set_physical_table(const PhysicalTable &table);

}  // namespace simcuda::devices
