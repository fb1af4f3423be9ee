// Device map parsing and resolution (device_map.h).
#include "coordinator/native/device_map.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <sstream>

namespace cusnap::coord {
namespace {

bool IsDigits(const std::string& s) {
  return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

Result<DeviceRef> ParseRef(const std::string& raw, const std::string& pair) {
  const std::string s = Trim(raw);
  if (IsDigits(s)) return DeviceRef{std::stoi(s), {}};
  unsigned char bytes[16];
  if (s.rfind("GPU-", 0) == 0 && ParseGpuUuid(s, bytes)) return DeviceRef{-1, FormatGpuUuid(bytes)};
  return Error{-1, "device map pair '" + pair + "': '" + s +
                       "' is neither a device ordinal nor a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"};
}

}  // namespace

bool ParseGpuUuid(const std::string& text, unsigned char bytes[16]) {
  if (text.rfind("GPU-", 0) != 0) return false;
  std::string hex;
  const std::string body = text.substr(4);
  static constexpr size_t kDashes[] = {8, 13, 18, 23};
  if (body.size() != 36) return false;
  for (size_t i = 0; i < body.size(); ++i) {
    const bool dash_here = i == kDashes[0] || i == kDashes[1] || i == kDashes[2] || i == kDashes[3];
    if (dash_here) {
      if (body[i] != '-') return false;
      continue;
    }
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(body[i])));
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    hex.push_back(c);
  }
  for (size_t i = 0; i < 16; ++i) {
    bytes[i] = static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return true;
}

Result<std::vector<DevicePair>> ParseDeviceMap(const std::string& text) {
  if (Trim(text).empty()) return Error{-1, "device map is empty (expected e.g. 0=1,1=0)"};
  std::vector<DevicePair> pairs;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || item.find('=', eq + 1) != std::string::npos) {
      return Error{-1, "device map pair '" + Trim(item) + "' is not of the form OLD=NEW"};
    }
    auto from = ParseRef(item.substr(0, eq), Trim(item));
    if (!from) return from.error();
    auto to = ParseRef(item.substr(eq + 1), Trim(item));
    if (!to) return to.error();
    // A device named twice is a wrong map, not wrong syntax: ResolveDeviceMap refuses it
    // (a refusal of the restore, exit 5), where "0" and its UUID are seen to be one GPU.
    pairs.push_back(DevicePair{*from, *to});
  }
  if (text.back() == ',') return Error{-1, "device map '" + text + "' ends with ','"};
  return pairs;
}

Result<std::vector<UuidPair>> ResolveDeviceMap(const std::vector<DevicePair>& pairs,
                                               const std::vector<std::string>& device_uuids,
                                               const std::vector<std::string>& job_uuids) {
  // "device 1 (GPU-...)": how a message names one of the driver's devices.
  auto named = [&](const std::string& uuid) {
    for (size_t i = 0; i < device_uuids.size(); ++i) {
      if (device_uuids[i] == uuid) return "device " + std::to_string(i) + " (" + uuid + ")";
    }
    return uuid;
  };
  auto resolve = [&](const DeviceRef& r) -> Result<std::string> {
    if (r.uuid.empty()) {
      if (r.ordinal < 0 || static_cast<size_t>(r.ordinal) >= device_uuids.size()) {
        return Error{-1, "device map names device " + std::to_string(r.ordinal) + ", but the " +
                             "driver has " + std::to_string(device_uuids.size()) + " device(s)"};
      }
      return device_uuids[static_cast<size_t>(r.ordinal)];
    }
    for (const auto& u : device_uuids) {
      if (u == r.uuid) return u;
    }
    return Error{-1, "device map names " + r.uuid + ", which the driver does not list"};
  };
  for (const auto& uuid : job_uuids) {
    if (std::find(device_uuids.begin(), device_uuids.end(), uuid) == device_uuids.end()) {
      return Error{-1, "the checkpoint used " + uuid + ", which the driver does not list; " +
                           "it cannot be mapped onto another GPU from here"};
    }
  }
  std::vector<UuidPair> out;
  std::set<std::string> from_seen, to_seen;
  for (const auto& p : pairs) {
    auto from = resolve(p.from);
    if (!from) return from.error();
    auto to = resolve(p.to);
    if (!to) return to.error();
    if (!from_seen.insert(*from).second) {
      return Error{-1, "device map maps " + named(*from) + " twice"};
    }
    if (!to_seen.insert(*to).second) {
      return Error{-1, "device map restores two devices onto " + named(*to)};
    }
    out.push_back(UuidPair{*from, *to});
  }
  // A device the map does not move stays where it is (the driver's rule): a target that is
  // not itself moved away would then hold two devices, which the driver refuses only after
  // the job was changed. Name the device the map leaves out.
  for (const auto& pair : out) {
    if (pair.from == pair.to || from_seen.count(pair.to) != 0) continue;
    // Only a device the checkpoint's list names is "also used" (a job without GPUs uses none).
    const bool job_uses =
        std::find(job_uuids.begin(), job_uuids.end(), pair.to) != job_uuids.end();
    return Error{-1, "device map is incomplete: it moves " + named(pair.from) + " onto " +
                         named(pair.to) + " but does not say where " + named(pair.to) +
                         (job_uses ? ", which the checkpoint also uses," : "") +
                         " goes (left out, it would stay there: two devices on one GPU); " +
                         "map every device, e.g. 0=1,1=0"};
  }
  // The driver takes only a permutation of every GPU it has, identity pairs included
  // (DRIVER-FACTS F14: a list naming some GPUs fails CUDA_ERROR_INVALID_VALUE): the devices
  // the map leaves out are given as staying where they are.
  for (const std::string& uuid : device_uuids) {
    if (from_seen.count(uuid) == 0) out.push_back(UuidPair{uuid, uuid});
  }
  return out;
}

std::map<std::string, uint64_t> BytesMovedOnto(
    const std::vector<UuidPair>& pairs,
    const std::vector<std::vector<std::pair<int, std::string>>>& gpus,
    const std::vector<std::vector<std::pair<int, uint64_t>>>& allocations) {
  std::map<std::string, std::string> onto;
  for (const auto& p : pairs) onto[p.from] = p.to;
  std::map<std::string, uint64_t> after;  // every GPU's bytes after the restore
  std::set<std::string> receiving;        // GPUs another GPU moves onto
  for (size_t i = 0; i < allocations.size() && i < gpus.size(); ++i) {
    for (const auto& [ordinal, bytes] : allocations[i]) {
      for (const auto& [o, uuid] : gpus[i]) {
        if (o != ordinal) continue;
        const auto moved = onto.find(uuid);
        const std::string& target = moved == onto.end() ? uuid : moved->second;
        after[target] += bytes;
        if (target != uuid) receiving.insert(target);
      }
    }
  }
  std::map<std::string, uint64_t> out;
  for (const auto& uuid : receiving) out[uuid] = after[uuid];
  return out;
}

}  // namespace cusnap::coord
