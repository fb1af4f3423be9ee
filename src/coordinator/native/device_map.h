// The restore device map (`--device-map`): which GPU each checkpointed GPU is restored onto,
// given as "0=1,1=0" (device ordinals) or "GPU-<uuid>=GPU-<uuid>" (mixing is allowed per
// pair side). Resolved to UUID pairs for CUcheckpointRestoreArgs.gpuPairs (DRIVER-FACTS F7;
// CUDA driver API, "Checkpointing": pairs are matched by GPU UUID).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/text.h"

namespace cusnap::coord {

/// One side of a pair: a device ordinal (uuid empty) or a GPU UUID ("GPU-...", ordinal -1).
struct DeviceRef {
  int ordinal = -1;
  std::string uuid;
  bool operator==(const DeviceRef&) const = default;
};

/// One "old=new" pair as written.
struct DevicePair {
  DeviceRef from;
  DeviceRef to;
  bool operator==(const DevicePair&) const = default;
};

/// Parses "0=1,1=0" / "GPU-a=GPU-b". Errors (code -1) name the bad pair: empty text, a pair
/// without '=', an ordinal that is not a non-negative integer, a malformed UUID. A device
/// named twice is left to ResolveDeviceMap (a refusal of the restore, not a syntax error).
Result<std::vector<DevicePair>> ParseDeviceMap(const std::string& text);

/// A pair resolved to UUIDs ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx").
struct UuidPair {
  std::string from;
  std::string to;
};

/// Resolves ordinals through `device_uuids` (the driver's devices, index = ordinal) into the
/// complete list the driver takes, and checks the map as the driver will, so that a bad one
/// is refused before the job changes. The driver restores only with a permutation of every
/// GPU (DRIVER-FACTS F14): the devices the map leaves out are paired with themselves.
/// Errors name the device: an ordinal out of range or a UUID the driver does not list; a
/// device of `job_uuids` (the devices the checkpoint recorded) the driver does not list; two
/// devices onto one; an incomplete map, one moving a device onto a GPU it does not also move
/// away ("0=1" alone, or "1=0", would put two devices on one GPU).
Result<std::vector<UuidPair>> ResolveDeviceMap(const std::vector<DevicePair>& pairs,
                                               const std::vector<std::string>& device_uuids,
                                               const std::vector<std::string>& job_uuids = {});

/// The bytes a restore with `pairs` (ResolveDeviceMap's answer) reallocates on each GPU
/// that receives memory from another GPU: every device allocation a participant created,
/// located by that participant's own ordinal -> UUID list (`gpus`, one list per entry of
/// `allocations`) and moved by the pairs. GPUs nothing moves onto are left out (a restore in
/// place needs no room check). Keys are UUIDs.
std::map<std::string, uint64_t> BytesMovedOnto(
    const std::vector<UuidPair>& pairs,
    const std::vector<std::vector<std::pair<int, std::string>>>& gpus,
    const std::vector<std::vector<std::pair<int, uint64_t>>>& allocations);

/// Formats 16 raw UUID bytes as nvidia-smi does (common/text.h).
using cusnap::FormatGpuUuid;

/// Parses FormatGpuUuid's output back into 16 bytes; false when malformed.
bool ParseGpuUuid(const std::string& text, unsigned char bytes[16]);

}  // namespace cusnap::coord
