// This process's GPUs by UUID (gpu_identity.h).
#include "shim/tables/gpu_identity.h"

#include <algorithm>
#include <mutex>

#include "common/text.h"

namespace cusnap::shim {

std::vector<std::string> VisibleGpuUuids(const DriverApi& api) {
  std::vector<std::string> out;
  int count = 0;
  if (api.cuDeviceGetCount == nullptr || api.cuDeviceGetCount(&count) != CUDA_SUCCESS) return out;
  // _v2 where the driver has it (CUDA 11.4 on: the same UUID, MIG instances named properly).
  auto get = api.cuDeviceGetUuid_v2 != nullptr ? api.cuDeviceGetUuid_v2 : api.cuDeviceGetUuid;
  if (get == nullptr) return out;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    CUuuid uuid{};
    if (api.cuDeviceGet(&device, ordinal) != CUDA_SUCCESS || get(&uuid, device) != CUDA_SUCCESS) {
      return {};
    }
    out.push_back(FormatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes)));
  }
  return out;
}

namespace {

std::mutex g_last_mutex;
// What the driver answered the last time INSPECT asked. Never destroyed: a control thread
// may answer while the process exits.
std::string& g_last = *new std::string;

std::vector<std::string> Split(const std::string& joined) {
  std::vector<std::string> out;
  for (size_t at = 0; at < joined.size();) {
    const size_t comma = std::min(joined.find(',', at), joined.size());
    out.push_back(joined.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace

std::string JoinedGpuUuids(const DriverApi& api, bool may_call_driver) {
  std::mutex& mutex = g_last_mutex;
  std::string& last = g_last;
  if (!may_call_driver) {
    std::lock_guard lock(mutex);
    return last;
  }
  std::string joined;
  for (const std::string& uuid : VisibleGpuUuids(api)) joined += (joined.empty() ? "" : ",") + uuid;
  std::lock_guard lock(mutex);
  last = joined;
  return joined;
}

Status CheckDevicesAfterMove(const DriverApi& api, const std::string& pairs) {
  std::vector<std::string> before;
  {
    std::lock_guard lock(g_last_mutex);
    before = Split(g_last);
  }
  if (before.empty()) return Ok{};
  const std::vector<std::string> now = VisibleGpuUuids(api);
  for (size_t ordinal = 0; ordinal < before.size(); ++ordinal) {
    std::string want = before[ordinal];
    for (const std::string& pair : Split(pairs)) {
      const size_t eq = pair.find('=');
      if (eq != std::string::npos && pair.compare(0, eq, want) == 0 && eq == want.size()) {
        want = pair.substr(eq + 1);
        break;
      }
    }
    const std::string is = ordinal < now.size() ? now[ordinal] : "no GPU";
    if (is == want) continue;
    return Error{CUDA_ERROR_INVALID_DEVICE,
                 ThisProcess() + ": its device " + std::to_string(ordinal) + " was " +
                     before[ordinal] + ", which the device map moves to " + want +
                     ", but after the native restore its device " + std::to_string(ordinal) +
                     " is " + is + " (the driver renumbered the process's devices); nothing "
                     "was rebuilt on it"};
  }
  return Ok{};
}

}  // namespace cusnap::shim
