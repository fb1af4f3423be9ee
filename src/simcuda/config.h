// simcuda's settings, read once from the environment.
//
//   SIMCUDA_DEVICE_COUNT    number of simulated devices, 0-8 (default 2)
//   SIMCUDA_DRIVER_VERSION  what cuDriverGetVersion reports and the newest version
//                           cuGetProcAddress accepts (default 13010, a CUDA 13.1 driver)
//   SIMCUDA_DEVICE_MEMORY_MIB  memory per device, MiB (default 16384); cuMemGetInfo's total
//   SIMCUDA_DIR             where checkpoint service sockets and the memory ledger live
//                           (default /tmp/simcuda-<uid>, created mode 0700)
//   SIMCUDA_FAULTS, SIMCUDA_DELAYS  see faults.h
//   SIMCUDA_MULTICAST_ROUND_BYTES  round every multicast object's capacity up to a multiple of
//                           this many bytes (a multiple of 2 MiB; 0 or unset: no rounding) while
//                           the object keeps its requested size, as r615 drivers do with 512 MiB
//                           (SPEC-REFERENCE A.2 #5): binds and maps past the requested size but
//                           within the capacity succeed
//   SIMCUDA_MULTICAST_BIND_TIMEOUT_MS  how long a multicast bind (or cuMemMap of a multicast
//                           object) waits for the rest of the team before it fails
//                           CUDA_ERROR_TIMEOUT (default 60000; the real driver waits for ever)
//   SIMCUDA_MULTICAST_CHECKPOINT_WAIT_MS  how long cuCheckpointProcessCheckpoint "hangs" on a
//                           process holding a multicast object before it fails (default: the
//                           timeoutMs of the lock, or 10000 when the lock had none)
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
  size_t multicast_round_bytes = 0;          // 0: capacity = requested size
  unsigned multicast_bind_timeout_ms = 60000;
  long multicast_checkpoint_wait_ms = -1;    // -1: the lock's timeout (10000 when it had none)
  /// Non-empty when a variable was malformed: cuInit fails CUDA_ERROR_INVALID_VALUE with it.
  std::string error;
};

/// The settings of this process (parsed on first use; never changes afterwards).
const Config &config();

}  // namespace simcuda
