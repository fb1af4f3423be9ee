// Global topology validation (topology.h).
#include "coordinator/topology.h"

#include <map>
#include <tuple>

#include "coordinator/records.h"

namespace cusnap::coord {
namespace {

using proto::Record;
using proto::RecordKind;

struct IdLess {
  bool operator()(const proto::ObjectId& a, const proto::ObjectId& b) const {
    return std::tie(a.creator_pid, a.creator_start, a.local_id) <
           std::tie(b.creator_pid, b.creator_start, b.local_id);
  }
};

bool Is(const Record& r, RecordKind kind) { return r.kind == static_cast<uint32_t>(kind); }

std::string Pid(int pid) { return "pid " + std::to_string(pid); }

std::string Range(uint64_t address, uint64_t size) {
  return Hex(address) + "-" + Hex(address + size);
}

/// What all participants say about one allocation.
struct AllocationFacts {
  std::vector<int> creators;        ///< participants with a creator allocation record
  uint64_t size = 0;                ///< from the creator's allocation record
  bool creator_anchored = false;    ///< creator holds a handle or a mapping
  std::vector<int> other_holders;   ///< non-creators with a handle or a mapping (first pid)
};

void CheckUntracked(const ParticipantView& p, std::vector<std::string>& problems) {
  if (p.untracked_imports == 1) {
    problems.push_back(Pid(p.pid) +
                       ": 1 allocation is imported from a descriptor that is not a cusnap "
                       "ticket; release it or export it through a process started with "
                       "'cusnap run'");
  } else if (p.untracked_imports > 1) {
    problems.push_back(Pid(p.pid) + ": " + std::to_string(p.untracked_imports) +
                       " allocations are imported from descriptors that are not cusnap "
                       "tickets; release them or export them through a process started "
                       "with 'cusnap run'");
  }
}

/// Rules a single record must satisfy on its own.
void CheckRecord(const ParticipantView& p, size_t index, const Record& r,
                 std::vector<std::string>& problems) {
  if (KindName(r.kind).rfind("kind ", 0) == 0) {
    problems.push_back(Pid(p.pid) + ": record " + std::to_string(index) + " has unknown " +
                       KindName(r.kind));
    return;
  }
  if (Is(r, RecordKind::kAllocation)) {
    if (r.object_size == 0) {
      problems.push_back(Pid(p.pid) + ": " + ObjectName(r.id) + " has size 0");
    }
    const bool id_names_me = r.id.creator_pid == p.pid && r.id.creator_start == p.start_time;
    if ((r.flags & proto::kCreator) && !id_names_me) {
      problems.push_back(Pid(p.pid) + ": " + ObjectName(r.id) +
                         " is reported as created here, but its id names another process");
    }
  }
  if (Is(r, RecordKind::kMapping) || Is(r, RecordKind::kMulticastMapping)) {
    const std::string what = (Is(r, RecordKind::kMapping) ? "mapping of " : "multicast mapping of ") +
                             (Is(r, RecordKind::kMapping) ? ObjectName(r.id) : MulticastName(r.id));
    if (r.address == 0 || r.size == 0) {
      problems.push_back(Pid(p.pid) + ": " + what + " has address " + Hex(r.address) +
                         " and size " + std::to_string(r.size) + " (both must be nonzero)");
    }
    if (r.access_count > proto::kMaxAccess) {
      problems.push_back(Pid(p.pid) + ": " + what + " at " + Hex(r.address) + " has " +
                         std::to_string(r.access_count) + " access descriptors (at most " +
                         std::to_string(proto::kMaxAccess) + ")");
    }
  }
}

/// A mapping must lie inside its allocation: offset + size <= allocation size, overflow-safe.
void CheckMappingBounds(const ParticipantView& p, const Record& r, uint64_t allocation_size,
                        std::vector<std::string>& problems) {
  if (r.offset > allocation_size || r.size > allocation_size - r.offset) {
    problems.push_back(Pid(p.pid) + ": mapping " + Range(r.address, r.size) + " of " +
                       ObjectName(r.id) + " at offset " + std::to_string(r.offset) +
                       " lies outside the allocation (size " +
                       std::to_string(allocation_size) + " bytes)");
  }
}

void CheckMulticast(std::span<const ParticipantView> participants,
                    std::vector<std::string>& problems) {
  std::map<proto::ObjectId, std::vector<int>, IdLess> creators;
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      if (!Is(r, RecordKind::kMulticast)) continue;
      auto& list = creators[r.id];
      if (r.flags & proto::kCreator) list.push_back(p.pid);
    }
  }
  for (const auto& [id, list] : creators) {
    if (list.size() > 1) {
      problems.push_back(MulticastName(id) + " is reported as created by " + Pid(list[0]) +
                         " and " + Pid(list[1]) + "; exactly one creator per multicast object");
    } else if (list.empty()) {
      problems.push_back(MulticastName(id) +
                         " is used, but its creator is not a participant; start the creator "
                         "with 'cusnap run' and include it in the checkpoint");
    }
  }
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      const bool member = Is(r, RecordKind::kMulticastDevice) ||
                          Is(r, RecordKind::kMulticastBinding) ||
                          Is(r, RecordKind::kMulticastMapping);
      if (member && !creators.contains(r.id)) {
        problems.push_back(Pid(p.pid) + ": " + KindName(r.kind) + " record names " +
                           MulticastName(r.id) + ", which no participant reports");
      }
    }
  }
}

}  // namespace

std::vector<std::string> ValidateTopology(std::span<const ParticipantView> participants) {
  std::vector<std::string> problems;
  std::map<proto::ObjectId, AllocationFacts, IdLess> allocations;

  for (const auto& p : participants) {
    CheckUntracked(p, problems);
    for (size_t i = 0; i < p.records.size(); ++i) {
      const Record& r = p.records[i];
      CheckRecord(p, i, r, problems);
      if (!Is(r, RecordKind::kAllocation) && !Is(r, RecordKind::kMapping)) continue;
      auto& facts = allocations[r.id];
      const bool creator = r.id.creator_pid == p.pid && r.id.creator_start == p.start_time;
      const bool holds = Is(r, RecordKind::kMapping) ||
                         (r.flags & proto::kHandleLive) != 0 || r.handle_count > 0;
      if (Is(r, RecordKind::kAllocation) && (r.flags & proto::kCreator)) {
        facts.creators.push_back(p.pid);
        facts.size = r.object_size;
      }
      if (creator && holds) facts.creator_anchored = true;
      if (!creator && holds && facts.other_holders.empty()) facts.other_holders.push_back(p.pid);
    }
  }

  for (const auto& [id, facts] : allocations) {
    if (facts.creators.size() > 1) {
      problems.push_back(ObjectName(id) + " is reported as created by " +
                         Pid(facts.creators[0]) + " and " + Pid(facts.creators[1]) +
                         "; exactly one creator per allocation");
      continue;
    }
    if (facts.creators.empty()) {
      const int user = facts.other_holders.empty() ? id.creator_pid : facts.other_holders[0];
      problems.push_back(Pid(user) + ": " + ObjectName(id) +
                         " is imported, but its creator is not a participant; start the "
                         "creator with 'cusnap run' and include it in the checkpoint");
      continue;
    }
    if (!facts.other_holders.empty() && !facts.creator_anchored) {
      problems.push_back(Pid(facts.creators[0]) + ": " + ObjectName(id) +
                         " is still held or mapped by " + Pid(facts.other_holders[0]) +
                         ", but its creator released both its handle and its mappings; keep a "
                         "handle or a mapping in the creator while others use it");
    }
  }

  // Bounds need the creator's size, so they run after every allocation record was seen.
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      if (!Is(r, RecordKind::kMapping)) continue;
      const auto it = allocations.find(r.id);
      if (it != allocations.end() && it->second.creators.size() == 1) {
        CheckMappingBounds(p, r, it->second.size, problems);
      }
    }
  }

  CheckMulticast(participants, problems);
  return problems;
}

}  // namespace cusnap::coord
