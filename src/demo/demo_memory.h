// Device memory as `cusnap demo` shows it: cuMemGetInfo per device, asked from the demo's
// own process through the driver the coordinator loaded. On a GPU the answer is device-wide
// (every process's memory); the simulated driver keeps a cross-process ledger for the same
// reason (src/simcuda/ledger.h), so both show the job's memory leaving and coming back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::cli::demo {

/// One device's reading, bytes.
struct DeviceMemory {
  int device = 0;
  uint64_t used = 0;   ///< total - free
  uint64_t total = 0;
};

/// Reads device memory through the driver library at `library` (already loaded and
/// initialized by the coordinator; dlopen finds the same copy). Retains the primary context
/// of each device once and releases them when destroyed.
class MemoryProbe {
 public:
  /// Errors: the library or an entry point is missing, or a device's primary context cannot
  /// be retained (the CUresult is named).
  static Result<std::unique_ptr<MemoryProbe>> Open(const std::string& library, int devices);
  ~MemoryProbe();
  MemoryProbe(const MemoryProbe&) = delete;
  MemoryProbe& operator=(const MemoryProbe&) = delete;

  /// cuMemGetInfo for every device, in ordinal order. Errors name the device and CUresult.
  Result<std::vector<DeviceMemory>> Read();

 private:
  struct Entry;
  MemoryProbe(void* handle, std::unique_ptr<Entry> entry, int devices);
  void* handle_;
  std::unique_ptr<Entry> e_;
  int devices_;
};

}  // namespace cusnap::cli::demo
