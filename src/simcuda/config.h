// simcuda's settings, read once from the environment.
//
//   SIMCUDA_DEVICE_COUNT    number of simulated devices, 0-8 (default 2)
//   SIMCUDA_DRIVER_VERSION  what cuDriverGetVersion reports and the newest version
//                           cuGetProcAddress accepts (default 13010, a CUDA 13.1 driver)
//   SIMCUDA_DEVICE_MEMORY_MIB  memory per device, MiB (default 16384); cuMemGetInfo's total
//   SIMCUDA_DIR             where checkpoint service sockets and the memory ledger live
//                           (default /tmp/simcuda-<uid>, created mode 0700)
//   SIMCUDA_FAULTS, SIMCUDA_DELAYS  see faults.h
#pragma once

#include <cstddef>
#include <string>

namespace simcuda {

inline constexpr int kMaxDevices = 8;
/// Allocation granularity, minimum and recommended (bytes), for device and host allocations.
inline constexpr size_t kGranularity = size_t{2} << 20;

struct Config {
  int device_count = 2;
  int driver_version = 13010;
  size_t device_memory_bytes = size_t{16} << 30;
  std::string dir;
  /// Non-empty when a variable was malformed: cuInit fails CUDA_ERROR_INVALID_VALUE with it.
  std::string error;
};

/// The settings of this process (parsed on first use; never changes afterwards).
const Config &config();

}  // namespace simcuda
