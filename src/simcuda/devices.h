// The simulated devices: SIMCUDA_DEVICE_COUNT physical GPUs, identical but for their UUID.
// A process names them by ordinal; ordinal N starts as physical GPU N. A restore onto other
// GPUs keeps the process's ordinals and changes the physical GPU behind each (measured on
// 2x H200, driver 580: DRIVER-FACTS F7), so every query by ordinal (UUID, name, memory
// accounting) goes through this process's ordinal -> physical table.
#pragma once

#include "config.h"
#include "cuda_api.h"

#include <array>
#include <optional>

namespace simcuda::devices {

/// Number of devices (config().device_count).
int count();
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
/// The physical GPU with this UUID, if any.
std::optional<int> find_physical(const CUuuid &uuid);

/// This process's ordinal -> physical GPU table (index = ordinal).
using PhysicalTable = std::array<int, kMaxDevices>;
/// The current table.
PhysicalTable physical_table();
/// Replaces the table (the checkpoint service, at restore, while the process is locked).
void set_physical_table(const PhysicalTable &table);

}  // namespace simcuda::devices
