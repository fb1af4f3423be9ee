// Names and the JSON form of topology records (records.h).
#include "coordinator/record/records.h"
#include "common/text.h"
#include "coordinator/record/json_number.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace cusnap::coord {
namespace {

using proto::Record;
using proto::RecordKind;

constexpr std::array<std::pair<RecordKind, std::string_view>, 6> kKinds{{
    {RecordKind::kAllocation, "allocation"},
    {RecordKind::kMapping, "mapping"},
    {RecordKind::kMulticast, "multicast"},
    {RecordKind::kMulticastDevice, "multicast_device"},
    {RecordKind::kMulticastBinding, "multicast_binding"},
    {RecordKind::kMulticastMapping, "multicast_mapping"},
}};

constexpr std::array<std::pair<uint32_t, std::string_view>, 3> kFlags{{
    {proto::kCreator, "creator"},
    {proto::kHandleLive, "handle_live"},
    {proto::kShared, "shared"},
}};

bool IsMulticastKind(uint32_t kind) {
  return kind >= static_cast<uint32_t>(RecordKind::kMulticast) &&
         kind <= static_cast<uint32_t>(RecordKind::kMulticastMapping);
}

nlohmann::json IdToJson(const proto::ObjectId& id) {
  return {{"creator_pid", id.creator_pid},
          {"creator_start", id.creator_start},
          {"local_id", id.local_id}};
}

proto::ObjectId IdFromJson(const nlohmann::json& json) {
  proto::ObjectId id{};
  id.creator_pid = IntegerField<int32_t>(json, "creator_pid", 0, kMaxPid);
  id.creator_start = IntegerField<uint64_t>(json, "creator_start");
  id.local_id = IntegerField<uint64_t>(json, "local_id");
  return id;
}

uint64_t HexFromJson(const nlohmann::json& json, const char* field) {
  const auto text = json.at(field).get<std::string>();
  if (text.size() < 3 || text.size() > 18 || text.compare(0, 2, "0x") != 0 ||
      text.find_first_not_of("0123456789abcdef", 2) != std::string::npos) {
    throw std::invalid_argument(std::string("field '") + field + "' is not a hex address: '" +
                                text + "'");
  }
  return std::stoull(text.substr(2), nullptr, 16);
}

}  // namespace

std::string KindName(uint32_t kind) {
  for (const auto& [k, name] : kKinds) {
    if (static_cast<uint32_t>(k) == kind) return std::string(name);
  }
  return "kind " + std::to_string(kind);
}

std::optional<uint32_t> KindFromName(std::string_view name) {
  for (const auto& [k, n] : kKinds) {
    if (n == name) return static_cast<uint32_t>(k);
  }
  return std::nullopt;
}

std::string Lowercase(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string ObjectName(const proto::ObjectId& id) {
  return "allocation " + std::to_string(id.local_id) + " of " + ProcessText(id.creator_pid);
}

std::string MulticastName(const proto::ObjectId& id) {
  return "multicast object " + std::to_string(id.local_id) + " of " + ProcessText(id.creator_pid);
}

uint64_t CreatedBytes(const std::vector<proto::Record>& records) {
  uint64_t bytes = 0;
  for (const auto& r : records) {
    if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation) &&
        (r.flags & proto::kCreator)) {
      bytes += r.object_size;
    }
  }
  return bytes;
}

bool HasMulticast(const std::vector<proto::Record>& records) {
  for (const auto& r : records) {
    if (r.kind >= static_cast<uint32_t>(proto::RecordKind::kMulticast) &&
        r.kind <= static_cast<uint32_t>(proto::RecordKind::kMulticastMapping)) {
      return true;
    }
  }
  return false;
}

std::string Hex(uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

nlohmann::json RecordToJson(const Record& r) {
  nlohmann::json flags = nlohmann::json::array();
  for (const auto& [bit, name] : kFlags) {
    if (r.flags & bit) flags.push_back(name);
  }
  nlohmann::json j{{"kind", KindName(r.kind)}, {"flags", flags}, {"id", IdToJson(r.id)}};
  const auto kind = static_cast<RecordKind>(r.kind);
  const bool has_access = kind == RecordKind::kMapping || kind == RecordKind::kMulticastMapping;
  j["address"] = Hex(r.address);
  j["size"] = r.size;
  j["offset"] = r.offset;
  j["object_size"] = r.object_size;
  j["handle_types"] = r.handle_types;
  j["handle_count"] = r.handle_count;
  if (!IsMulticastKind(r.kind)) {
    j["alloc_type"] = r.alloc_type;
    j["location_type"] = r.location_type;
    j["location_id"] = r.location_id;
  } else {
    j["member"] = IdToJson(r.member);
    j["member_offset"] = r.member_offset;
    j["op_flags"] = r.op_flags;
    j["mc_flags"] = r.mc_flags;
    j["extent"] = r.extent;
    j["num_devices"] = r.num_devices;
    j["device"] = r.device;
    j["bind_kind"] = r.bind_kind;
    j["bind_api"] = r.bind_api;
  }
  if (has_access) {
    nlohmann::json access = nlohmann::json::array();
    for (uint32_t i = 0; i < r.access_count && i < proto::kMaxAccess; ++i) {
      access.push_back({{"location_type", r.access[i].location_type},
                        {"location_id", r.access[i].location_id},
                        {"flags", r.access[i].flags}});
    }
    j["access"] = access;
  }
  return j;
}

Record RecordFromJson(const nlohmann::json& j) {
  Record r{};
  const auto kind_name = j.at("kind").get<std::string>();
  const auto kind = KindFromName(kind_name);
  if (!kind) throw std::invalid_argument("unknown record kind '" + kind_name + "'");
  r.kind = *kind;
  for (const auto& flag : j.at("flags")) {
    const auto name = flag.get<std::string>();
    bool known = false;
    for (const auto& [bit, n] : kFlags) {
      if (n == name) {
        r.flags |= bit;
        known = true;
      }
    }
    if (!known) throw std::invalid_argument("unknown record flag '" + name + "'");
  }
  r.id = IdFromJson(j.at("id"));
  r.address = HexFromJson(j, "address");
  r.size = IntegerField<uint64_t>(j, "size");
  r.offset = IntegerField<uint64_t>(j, "offset");
  r.object_size = IntegerField<uint64_t>(j, "object_size");
  r.handle_types = IntegerField<uint32_t>(j, "handle_types");
  r.handle_count = IntegerField<uint32_t>(j, "handle_count");
  if (!IsMulticastKind(r.kind)) {
    r.alloc_type = IntegerField<int32_t>(j, "alloc_type");
    r.location_type = IntegerField<int32_t>(j, "location_type");
    r.location_id = IntegerField<int32_t>(j, "location_id");
  } else {
    r.member = IdFromJson(j.at("member"));
    r.member_offset = IntegerField<uint64_t>(j, "member_offset");
    r.op_flags = IntegerField<uint64_t>(j, "op_flags");
    r.mc_flags = IntegerField<uint64_t>(j, "mc_flags");
    r.extent = IntegerField<uint64_t>(j, "extent");
    r.num_devices = IntegerField<uint32_t>(j, "num_devices");
    r.device = IntegerField<int32_t>(j, "device");
    r.bind_kind = IntegerField<uint32_t>(j, "bind_kind");
    r.bind_api = IntegerField<uint32_t>(j, "bind_api");
  }
  if (j.contains("access")) {
    const auto& access = j.at("access");
    if (access.size() > proto::kMaxAccess) {
      throw std::invalid_argument("record has " + std::to_string(access.size()) +
                                  " access descriptors (at most " +
                                  std::to_string(proto::kMaxAccess) + ")");
    }
    for (const auto& a : access) {
      auto& out = r.access[r.access_count++];
      out.location_type = IntegerField<int32_t>(a, "location_type");
      out.location_id = IntegerField<int32_t>(a, "location_id");
      out.flags = IntegerField<uint32_t>(a, "flags");
    }
  }
  return r;
}

}  // namespace cusnap::coord
