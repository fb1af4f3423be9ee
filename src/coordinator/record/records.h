// Topology records as people and files read them: names for kinds and flags (ops and shim
// states are named by protocol.h; lowercased here for the CLI), a short phrase naming an
// allocation or mapping for error messages, and the JSON form of a Record used by the state
// file and by restore's record-for-record comparison.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/protocol.h"

namespace cusnap::coord {

/// "allocation", "mapping", "multicast", ... ; "kind <n>" for a value outside RecordKind.
std::string KindName(uint32_t kind);
/// The RecordKind named `name`, or nullopt.
std::optional<uint32_t> KindFromName(std::string_view name);

/// A name from the protocol's lists (proto::OpName, proto::ShimStateName) as the CLI prints
/// it: lowercase ("quiesce", "multicast_detached", "active").
std::string Lowercase(std::string_view name);

/// "allocation 7 of pid 4120" (creator pid + the creator's local id).
std::string ObjectName(const proto::ObjectId& id);
/// "multicast object 3 of pid 4120".
std::string MulticastName(const proto::ObjectId& id);

/// Bytes of the allocations `records` say this process created (its kAllocation records
/// flagged kCreator): what its carrier saves.
uint64_t CreatedBytes(const std::vector<proto::Record>& records);

/// True when any of `records` is of a multicast kind (a multicast object, its devices,
/// bindings or mappings).
bool HasMulticast(const std::vector<proto::Record>& records);

/// What a multicast phase line says when the job has no multicast object (the phase still
/// runs: every shim steps through it).
inline constexpr const char* kNoMulticastNote = "no multicast objects";

/// "0x7f0000000000" (lowercase, no padding).
std::string Hex(uint64_t value);

/// The JSON form of one record: the kind and flags by name, every field that matters for
/// the kind (unicast fields for allocations and mappings, multicast fields for the
/// multicast kinds), addresses as hex strings. Never holds descriptors or raw handles.
nlohmann::json RecordToJson(const proto::Record& record);

/// Parses RecordToJson's output. Throws nlohmann::json::exception or std::invalid_argument
/// with a message naming the bad field.
proto::Record RecordFromJson(const nlohmann::json& json);

}  // namespace cusnap::coord
