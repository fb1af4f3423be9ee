// The native checkpoint API (cuCheckpointProcessLock/Checkpoint/Restore/Unlock/GetState),
// reached through the driver library loaded at run time: NVIDIA's libcuda.so.1 or the
// simulated driver from the build tree. The same code drives both (DESIGN.md, "Parts").
#pragma once

#include <cuda.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "coordinator/native/device_map.h"

namespace cusnap::coord {

/// The checkpoint entry points the coordinator needs, per target process. Implemented over
/// a loaded libcuda (LoadDriver) and by fakes in tests. Every method is safe to call from
/// several threads at once for different pids. Errors carry the CUresult as code and name
/// the pid and the entry point.
class CheckpointDriver {
 public:
  virtual ~CheckpointDriver() = default;
  /// "simulated" or "NVIDIA <driver version> (CUDA <x.y>)".
  virtual std::string Describe() const = 0;
  /// True for the simulated driver.
  virtual bool simulated() const = 0;
  /// cuCheckpointProcessGetState(pid); any CUresult other than success is an Error
  /// (e.g. CUDA_ERROR_NOT_INITIALIZED or NOT_FOUND for a process that never used CUDA).
  virtual Result<CUprocessState> GetState(int pid) = 0;
  /// cuCheckpointProcessLock with CUcheckpointLockArgs.timeoutMs = timeout_ms (0: none).
  virtual Status Lock(int pid, unsigned timeout_ms) = 0;
  /// cuCheckpointProcessCheckpoint: GPU state to host, device memory released.
  virtual Status Checkpoint(int pid) = 0;
  /// cuCheckpointProcessRestore with `pairs` as CUcheckpointRestoreArgs.gpuPairs (empty:
  /// no remapping; DRIVER-FACTS F7).
  virtual Status Restore(int pid, std::span<const UuidPair> pairs) = 0;
  /// cuCheckpointProcessUnlock.
  virtual Status Unlock(int pid) = 0;
  /// UUIDs of the driver's devices ("GPU-..."), index = ordinal (cuDeviceGetUuid).
  virtual Result<std::vector<std::string>> DeviceUuids() = 0;
  /// Free bytes on the GPU named `uuid` (cuMemGetInfo in its primary context, retained for
  /// the call and released again). Errors name the GPU and the failing call; code -2 when
  /// this driver cannot tell (FreeBytesUnknown: fakes), and the caller then skips the check.
  virtual Result<uint64_t> DeviceFreeBytes(const std::string& uuid) = 0;
  /// Model names of the driver's devices ("NVIDIA H200"), index = ordinal (cuDeviceGetName),
  /// for the images manifest (images.h). Fakes that do not model names answer none.
  virtual Result<std::vector<std::string>> DeviceNames() = 0;
  /// True when this driver holds every process it checkpoints stopped (hold.h, WithHold):
  /// lifecycle requests then say so (proto::StepRequest::held).
  virtual bool HoldsStopped() const = 0;
  // Every member is pure: a wrapper (hold.h) that forgot one would answer a default in
  // place of the driver (a dump recorded no GPU models through the hold's wrapper).
};

/// DeviceFreeBytes's answer from a driver that cannot tell (code -2).
inline Error FreeBytesUnknown(const std::string& uuid) {
  return Error{-2, "free memory on " + uuid + " is not known"};
}

/// Which driver to load (env CUSNAP_DRIVER).
enum class DriverChoice { kAuto, kReal, kSimulated };

/// Parses CUSNAP_DRIVER's value (common/settings.h): "" or "auto", "real", "sim"; an Error
/// (code EINVAL) naming the value and the values taken otherwise.
Result<DriverChoice> ParseDriverChoice(const std::string& text);

/// Directory of the simulated driver for a cusnap binary in `bin_dir`: <bin_dir>/../simcuda
/// in the build tree (build/<preset>/{bin,simcuda}), else <bin_dir>/../libexec/cusnap/simcuda
/// (the installed layout, `cmake --install`) when that one holds libcuda.so.1.
std::string SimulatedDriverDir(const std::string& bin_dir);

/// Loads the driver. kReal: the system libcuda.so.1, cuInit(0) must succeed. kSimulated:
/// SimulatedDriverDir(bin_dir)/libcuda.so.1. kAuto: the system driver if it loads, cuInit(0)
/// succeeds and it has at least one device, else the simulated one. Errors name the library
/// path and dlerror()/CUresult. A library on which cuInit ran is never unloaded (its threads
/// would run unmapped code): it stays loaded for the life of the process. Describe() and
/// simulated() tell the simulated driver by what the library exports, not by its path.
Result<std::unique_ptr<CheckpointDriver>> LoadDriver(DriverChoice choice,
                                                     const std::string& bin_dir);

/// Maps the libraries LoadDriver(choice, bin_dir) may open, without initialising them, and
/// keeps them mapped (RTLD_NODELETE): a LoadDriver after this process joined another mount
/// namespace (a container's, cli/pid_namespace.h) then finds them by name among the loaded
/// ones instead of in that namespace's files, which are the container's (not trusted, and
/// without the simulated driver). A library that cannot be mapped is left out silently:
/// LoadDriver then names it.
void KeepDriverLibrariesMapped(DriverChoice choice, const std::string& bin_dir);

/// Decides which driver `choice` means (used by `cusnap run`, which only needs to know
/// whether to put the simulated driver on LD_LIBRARY_PATH). Auto mode probes the library
/// found as libcuda.so.1 as LoadDriver does (and keeps it loaded: see LoadDriver); true when
/// it is unusable or is itself the simulated driver. The simulated driver of `bin_dir` is
/// never loaded here.
Result<bool> WouldUseSimulated(DriverChoice choice, const std::string& bin_dir);

/// The NVIDIA kernel module's version ("580.95.05") from the first line of
/// /proc/driver/nvidia/version, for the proprietary and the open module alike; "" when the
/// line names none.
std::string KernelModuleVersionFromLine(std::string_view line);

}  // namespace cusnap::coord
