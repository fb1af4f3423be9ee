// The simulated devices: SIMCUDA_DEVICE_COUNT of them, identical but for ordinal and UUID.
#pragma once

#include "cuda_api.h"

#include <optional>

namespace simcuda::devices {

/// Number of devices (config().device_count).
int count();
/// True when `device` is an ordinal in [0, count()).
bool valid(CUdevice device);
/// The device's UUID: the same in every process (restore device maps name devices by it).
CUuuid uuid(int device);
/// Ordinal of the device with this UUID, if any.
std::optional<int> find(const CUuuid &uuid);

}  // namespace simcuda::devices
