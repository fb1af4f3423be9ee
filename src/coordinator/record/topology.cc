// Global topology validation (topology.h).
#include "coordinator/record/topology.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "common/ids.h"
#include "common/text.h"
#include "common/ticket.h"
#include "coordinator/record/records.h"

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

/// The rule "the creator still holds a handle or a mapping while others use the allocation".
std::string CreatorReleased(const proto::ObjectId& id, int holder) {
  return ProcessText(id.creator_pid) + ": " + ObjectName(id) + " is still held or mapped by " +
         ProcessText(holder) + ", but its creator released both its handle and its mappings; keep a "
         "handle or a mapping in the creator while others use it";
}

/// The rule "the creator of what a participant imported takes part too". The job's root
/// with --pid, or --all, takes every process of a `cusnap run` job: a creator left out is
/// most often a process of the same job named by a child's pid, which the message says
/// rather than asking to start with 'cusnap run' a creator that already was.
std::string CreatorLeftOut(int user, const std::string& what, int creator_pid) {
  return ProcessText(user) + ": " + what + " is imported, but its creator is not a " +
         "participant; checkpoint every process that shares memory together (the job's root "
         "with --pid, or --all), each started with 'cusnap run' (the creator is " +
         ProcessText(creator_pid) + ")";
}

/// True when `id` was created by one of `participants` (same pid and start time).
bool CreatedByParticipant(std::span<const ParticipantView> participants,
                          const proto::ObjectId& id) {
  return std::any_of(participants.begin(), participants.end(), [&](const ParticipantView& p) {
    return p.pid == id.creator_pid && p.start_time == id.creator_start;
  });
}

/// The closed participant set, the creator's side: every live importer a participant's
/// export cache remembers must be a participant. One message per missing process, naming
/// the first object it imported and how many more.
void CheckImporters(std::span<const ParticipantView> participants,
                    std::vector<std::string>& problems) {
  std::map<std::pair<int, uint64_t>, std::vector<const proto::Importer*>> missing;
  for (const auto& p : participants) {
    for (const auto& importer : p.importers) {
      const bool participates =
          std::any_of(participants.begin(), participants.end(), [&](const ParticipantView& q) {
            return q.pid == importer.pid && q.start_time == importer.start_time;
          });
      if (!participates) missing[{importer.pid, importer.start_time}].push_back(&importer);
    }
  }
  for (const auto& [process, imports] : missing) {
    const proto::Importer& first = *imports.front();
    const std::string what = first.kind == static_cast<uint32_t>(TicketKind::kMulticast)
                                 ? MulticastName(first.id)
                                 : ObjectName(first.id);
    const std::string more =
        imports.size() > 1 ? " (and " + std::to_string(imports.size() - 1) + " more)" : "";
    problems.push_back(ProcessText(process.first) + " imported " + what + more +
                       " and is still running, but is not a participant of this checkpoint; "
                       "checkpoint every process that shares memory together (the job's root "
                       "with --pid, or --all)");
  }
}

/// Where an untracked import's allocation lives, as the driver reported it at import.
std::string UntrackedLocation(const Record& r) {
  const std::string id = std::to_string(r.location_id);
  switch (r.location_type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return "on device " + id;
    case CU_MEM_LOCATION_TYPE_HOST: return "in host memory";
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return "on host NUMA node " + id;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return "on the host NUMA node current at import";
    case CU_MEM_LOCATION_TYPE_INVALID: return "at a location the driver did not report";
    default: return "at location type " + std::to_string(r.location_type) + " id " + id;
  }
}

/// The kind of shareable handle an untracked import came from.
std::string UntrackedSource(uint32_t handle_type) {
  switch (handle_type) {
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: return "fd import";
    case CU_MEM_HANDLE_TYPE_FABRIC: return "fabric handle import";
    case CU_MEM_HANDLE_TYPE_WIN32:
    case CU_MEM_HANDLE_TYPE_WIN32_KMT: return "Win32 handle import";
    default: return "handle type " + std::to_string(handle_type) + " import";
  }
}

/// One refusal line for one untracked import: `ranges` are its kUntrackedImport records
/// (protocol.h), one per mapping or a single unmapped one. The size the driver never reports
/// for an imported handle is bounded below by the furthest byte a mapping reaches.
std::string UntrackedImportText(int pid, const std::vector<const Record*>& ranges) {
  uint64_t at_least = 0;
  std::vector<std::string> mapped;
  for (const Record* r : ranges) {
    if (r->size == 0) continue;
    if (r->offset <= UINT64_MAX - r->size) at_least = std::max(at_least, r->offset + r->size);
    mapped.push_back(Range(r->address, r->size) +
                     (r->offset != 0 ? " (at offset " + std::to_string(r->offset) + ")" : ""));
  }
  std::string where = mapped.empty() ? "not mapped" : "mapped at ";
  for (size_t i = 0; i < mapped.size(); ++i) {
    where += (i == 0 ? "" : i + 1 == mapped.size() ? " and " : ", ") + mapped[i];
  }
  return ProcessText(pid) + ": an allocation " +
         (at_least > 0 ? "of at least " + std::to_string(at_least) + " bytes " : "") +
         UntrackedLocation(*ranges.front()) + ", " + where + ", was imported from a descriptor "
         "that is not a cusnap ticket (" + UntrackedSource(ranges.front()->handle_types) +
         " outside cusnap); release it, or export it from a process started with 'cusnap run'";
}

/// No live untracked imports: one line per import IDENTIFY described (at most
/// proto::kMaxUntrackedReported), then one line for the rest of its count.
void CheckUntracked(const ParticipantView& p, std::vector<std::string>& problems) {
  std::vector<std::pair<uint64_t, std::vector<const Record*>>> imports;  // by real handle
  for (const Record& r : p.untracked) {
    if (!Is(r, RecordKind::kUntrackedImport)) continue;
    auto it = std::find_if(imports.begin(), imports.end(),
                           [&](const auto& import) { return import.first == r.id.local_id; });
    if (it == imports.end()) {
      imports.emplace_back(r.id.local_id, std::vector<const Record*>{});
      it = std::prev(imports.end());
    }
    it->second.push_back(&r);
  }
  uint64_t named = 0;
  for (const auto& [handle, ranges] : imports) {
    if (named == proto::kMaxUntrackedReported) break;
    problems.push_back(UntrackedImportText(p.pid, ranges));
    ++named;
  }
  const uint64_t rest = std::max<uint64_t>(p.untracked_imports, imports.size()) - named;
  const std::string more = named > 0 ? " more" : "";
  if (rest == 1) {
    problems.push_back(ProcessText(p.pid) + ": 1" + more + " allocation is imported from a descriptor "
                       "that is not a cusnap ticket; release it or export it through a process "
                       "started with 'cusnap run'");
  } else if (rest > 1) {
    problems.push_back(ProcessText(p.pid) + ": " + std::to_string(rest) + more + " allocations are "
                       "imported from descriptors that are not cusnap tickets; release them or "
                       "export them through a process started with 'cusnap run'");
  }
}

/// No entry point whose memory cusnap cannot carry: one line per entry point the shim noted.
void CheckUnsupported(const ParticipantView& p, std::vector<std::string>& problems) {
  size_t at = 0;
  while (at < p.unsupported.size()) {
    size_t end = p.unsupported.find('\n', at);
    if (end == std::string::npos) end = p.unsupported.size();
    if (end > at) {
      problems.push_back(ProcessText(p.pid) + ": used " + p.unsupported.substr(at, end - at) +
                         ", whose memory cusnap cannot carry through a checkpoint (README, "
                         "'Limits'); run this process without it");
    }
    at = end + 1;
  }
}

/// Rules a single record must satisfy on its own.
void CheckRecord(const ParticipantView& p, size_t index, const Record& r,
                 std::vector<std::string>& problems) {
  if (KindName(r.kind).rfind("kind ", 0) == 0) {
    problems.push_back(ProcessText(p.pid) + ": record " + std::to_string(index) + " has unknown " +
                       KindName(r.kind));
    return;
  }
  if (Is(r, RecordKind::kAllocation)) {
    if (r.object_size == 0) {
      problems.push_back(ProcessText(p.pid) + ": " + ObjectName(r.id) + " has size 0");
    }
    const bool id_names_me = r.id.creator_pid == p.pid && r.id.creator_start == p.start_time;
    if ((r.flags & proto::kCreator) && !id_names_me) {
      problems.push_back(ProcessText(p.pid) + ": " + ObjectName(r.id) +
                         " is reported as created here, but its id names another process");
    }
  }
  if (Is(r, RecordKind::kMapping) || Is(r, RecordKind::kMulticastMapping)) {
    const std::string what = (Is(r, RecordKind::kMapping) ? "mapping of " : "multicast mapping of ") +
                             (Is(r, RecordKind::kMapping) ? ObjectName(r.id) : MulticastName(r.id));
    if (r.address == 0 || r.size == 0) {
      problems.push_back(ProcessText(p.pid) + ": " + what + " has address " + Hex(r.address) +
                         " and size " + std::to_string(r.size) + " (both must be nonzero)");
    }
    if (r.access_count > proto::kMaxAccess) {
      problems.push_back(ProcessText(p.pid) + ": " + what + " at " + Hex(r.address) + " has " +
                         std::to_string(r.access_count) + " access descriptors (at most " +
                         std::to_string(proto::kMaxAccess) + ")");
    }
  }
}

/// A mapping must lie inside its allocation: offset + size <= allocation size, overflow-safe.
void CheckMappingBounds(const ParticipantView& p, const Record& r, uint64_t allocation_size,
                        std::vector<std::string>& problems) {
  if (r.offset > allocation_size || r.size > allocation_size - r.offset) {
    problems.push_back(ProcessText(p.pid) + ": mapping " + Range(r.address, r.size) + " of " +
                       ObjectName(r.id) + " at offset " + std::to_string(r.offset) +
                       " lies outside the allocation (size " +
                       std::to_string(allocation_size) + " bytes)");
  }
}

/// What all participants say about one multicast object.
struct MulticastFacts {
  std::vector<int> creators;                          ///< pids reporting kCreator
  std::vector<std::pair<int, const Record*>> reports; ///< every kMulticast record, by pid
  std::vector<std::pair<int, int>> devices;           ///< distinct (pid, device) adds
  uint64_t extent = 0;  ///< largest extent any participant's driver accepted (or the size)
};

using MulticastObjects = std::map<proto::ObjectId, MulticastFacts, IdLess>;

std::string Properties(const Record& r) {
  return "size " + std::to_string(r.object_size) + ", " + std::to_string(r.num_devices) +
         " devices, handle types " + std::to_string(r.handle_types) + ", flags " +
         std::to_string(r.mc_flags);
}

bool SameProperties(const Record& a, const Record& b) {
  return a.object_size == b.object_size && a.num_devices == b.num_devices &&
         a.handle_types == b.handle_types && a.mc_flags == b.mc_flags;
}

std::string DeviceList(const std::vector<std::pair<int, int>>& devices) {
  if (devices.empty()) return "none";
  std::string text;
  for (const auto& [pid, device] : devices) {
    text += (text.empty() ? "" : ", ") + ProcessText(pid) + " device " + std::to_string(device);
  }
  return text;
}

/// A record of a team member's part: a device added, a binding, a multicast mapping.
bool IsTeamRecord(const Record& r) {
  return Is(r, RecordKind::kMulticastDevice) || Is(r, RecordKind::kMulticastBinding) ||
         Is(r, RecordKind::kMulticastMapping);
}

/// Every multicast object a participant reports, with its creators, reports and largest
/// extent. The rule "a creator record's id names its own process" is checked on the way.
MulticastObjects CollectMulticastObjects(std::span<const ParticipantView> participants,
                                         std::vector<std::string>& problems) {
  MulticastObjects objects;
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      if (!Is(r, RecordKind::kMulticast)) continue;
      auto& facts = objects[r.id];
      facts.reports.emplace_back(p.pid, &r);
      facts.extent = std::max({facts.extent, r.object_size, r.extent});
      if (r.flags & proto::kCreator) {
        facts.creators.push_back(p.pid);
        if (r.id.creator_pid != p.pid || r.id.creator_start != p.start_time) {
          problems.push_back(ProcessText(p.pid) + ": " + MulticastName(r.id) +
                             " is reported as created here, but its id names another process");
        }
      }
    }
  }
  return objects;
}

/// Adds each distinct (process, device) add of a reported object to its facts; an add of an
/// object nobody reports is CheckUnreportedObjects's.
void CollectTeamDevices(std::span<const ParticipantView> participants, MulticastObjects& objects) {
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      if (!Is(r, RecordKind::kMulticastDevice)) continue;
      const auto it = objects.find(r.id);
      if (it == objects.end()) continue;
      const std::pair<int, int> add{p.pid, r.device};
      auto& devices = it->second.devices;
      if (std::find(devices.begin(), devices.end(), add) == devices.end()) devices.push_back(add);
    }
  }
}

/// The rule "exactly one creator, and it takes part while others use the object" (rebuilding
/// the team needs its creator: it creates the object again). False when broken.
bool CheckOneCreator(std::span<const ParticipantView> participants, const proto::ObjectId& id,
                     const MulticastFacts& facts, std::vector<std::string>& problems) {
  if (facts.creators.size() > 1) {
    problems.push_back(MulticastName(id) + " is reported as created by " +
                       ProcessText(facts.creators[0]) + " and " + ProcessText(facts.creators[1]) +
                       "; exactly one creator per multicast object");
    return false;
  }
  if (!facts.creators.empty()) return true;
  const int user = facts.reports.front().first;
  if (CreatedByParticipant(participants, id)) {
    problems.push_back(ProcessText(id.creator_pid) + ": " + MulticastName(id) + " is still used by " +
                       ProcessText(user) + ", but its creator released every "
                       "handle and mapping of it; keep a handle or a mapping in the creator "
                       "while others use it");
  } else {
    problems.push_back(CreatorLeftOut(user, MulticastName(id), id.creator_pid));
  }
  return false;
}

/// The rule "every member reports the same requested properties". False when broken.
bool CheckSameProperties(const proto::ObjectId& id, const MulticastFacts& facts,
                         std::vector<std::string>& problems) {
  const auto& [first_pid, first] = facts.reports.front();
  bool consistent = true;
  for (const auto& [pid, r] : facts.reports) {
    if (SameProperties(*first, *r)) continue;
    problems.push_back(MulticastName(id) + ": " + ProcessText(first_pid) + " reports " +
                       Properties(*first) + ", but " + ProcessText(pid) + " reports " +
                       Properties(*r) + "; every member must agree");
    consistent = false;
  }
  return consistent;
}

/// The rule "size and device count are nonzero". False when broken.
bool CheckNonzeroProperties(const proto::ObjectId& id, const Record& properties,
                            std::vector<std::string>& problems) {
  if (properties.num_devices != 0 && properties.object_size != 0) return true;
  problems.push_back(MulticastName(id) + " has " + Properties(properties) +
                     " (size and device count must be nonzero)");
  return false;
}

/// The rule "the distinct (process, device) adds number exactly the object's numDevices": a
/// member outside the participants (e.g. one started without cusnap) leaves the team partial.
void CheckTeamComplete(const proto::ObjectId& id, const MulticastFacts& facts,
                       const Record& properties, std::vector<std::string>& problems) {
  if (facts.devices.size() < properties.num_devices) {
    std::string members;
    for (const auto& [pid, r] : facts.reports) members += (members.empty() ? "" : ", ") + ProcessText(pid);
    problems.push_back(MulticastName(id) + " is a partial team: its " +
                       std::to_string(properties.num_devices) + " devices were not all added by "
                       "participants (added: " + DeviceList(facts.devices) + "; members "
                       "checkpointed: " + members + "). Another process of the team is not a "
                       "participant (started without cusnap, or outside the checkpointed "
                       "tree); checkpoint every member of the team together");
  } else if (facts.devices.size() > properties.num_devices) {
    problems.push_back(MulticastName(id) + " has " + std::to_string(facts.devices.size()) +
                       " devices added (" + DeviceList(facts.devices) + ") but was created for " +
                       std::to_string(properties.num_devices));
  }
}

/// One object's team rules, each checked only when the ones before it hold.
void CheckTeam(std::span<const ParticipantView> participants, const proto::ObjectId& id,
               const MulticastFacts& facts, std::vector<std::string>& problems) {
  if (!CheckOneCreator(participants, id, facts, problems)) return;
  if (!CheckSameProperties(id, facts, problems)) return;
  const Record& properties = *facts.reports.front().second;
  if (!CheckNonzeroProperties(id, properties, problems)) return;
  CheckTeamComplete(id, facts, properties, problems);
}

/// The rule "a device add, binding or multicast mapping names an object a participant reports".
void CheckUnreportedObjects(std::span<const ParticipantView> participants,
                            const MulticastObjects& objects, std::vector<std::string>& problems) {
  for (const auto& p : participants) {
    for (const auto& r : p.records) {
      if (IsTeamRecord(r) && !objects.contains(r.id)) {
        problems.push_back(ProcessText(p.pid) + ": " + KindName(r.kind) + " record names " +
                           MulticastName(r.id) + ", which no participant reports");
      }
    }
  }
}

/// The binding's problem with the object's extent ("" when none): a binding lies within the
/// largest extent any participant's driver accepted.
std::string BindingOutsideExtent(const std::string& what, const Record& r, uint64_t extent) {
  if (r.size != 0 && r.offset <= extent && r.size <= extent - r.offset) return "";
  return what + " (" + std::to_string(r.size) + " bytes) lies outside the " +
         "object's extent (" + std::to_string(extent) + " bytes)";
}

/// The binding's problem with its kind and ABI ("" when none): each is 1 or 2.
std::string BindingKindUnknown(const std::string& what, const Record& r) {
  if ((r.bind_kind == 1 || r.bind_kind == 2) && (r.bind_api == 1 || r.bind_api == 2)) return "";
  return what + " has bind kind " + std::to_string(r.bind_kind) + " and ABI " +
         std::to_string(r.bind_api) + " (each must be 1 or 2)";
}

/// The binding's problem with its address ("" when none): an address binding has one.
std::string BindingAtAddressZero(const std::string& what, const Record& r) {
  return r.bind_kind == 2 && r.address == 0 ? what + " binds address 0" : "";
}

/// The binding's problem with its member ("" when none): the tracked allocation a handle
/// binding binds is one the process still holds.
std::string BoundMemberReleased(const std::string& what, const ParticipantView& p,
                                const Record& r) {
  const bool tracked_member = r.member.local_id != 0;
  if (r.bind_kind != 1 || !tracked_member) return "";
  const bool held = std::any_of(p.records.begin(), p.records.end(), [&](const Record& a) {
    return Is(a, RecordKind::kAllocation) && a.id == r.member;
  });
  if (held) return "";
  return what + " binds " + ObjectName(r.member) + ", which this process " +
         "no longer holds; keep a handle of every bound member";
}

/// The binding's problem with its device ("" when none): the device was added to the team.
std::string BindingDeviceNotAdded(const std::string& what, const Record& r,
                                  const MulticastFacts& facts) {
  const bool added = std::any_of(facts.devices.begin(), facts.devices.end(),
                                 [&](const auto& d) { return d.second == r.device; });
  return added ? "" : what + ": that device was never added to the team";
}

/// The binding rules, in order, for one binding record of `p`.
void CheckBinding(const ParticipantView& p, const Record& r, const MulticastFacts& facts,
                  std::vector<std::string>& problems) {
  const std::string what = ProcessText(p.pid) + ": binding of device " + std::to_string(r.device) +
                           " at offset " + std::to_string(r.offset) + " of " + MulticastName(r.id);
  for (std::string problem : {BindingOutsideExtent(what, r, facts.extent),
                              BindingKindUnknown(what, r), BindingAtAddressZero(what, r),
                              BoundMemberReleased(what, p, r),
                              BindingDeviceNotAdded(what, r, facts)}) {
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
}

/// The rule "a multicast mapping lies within the object's extent".
void CheckMulticastMapping(const ParticipantView& p, const Record& r, uint64_t extent,
                           std::vector<std::string>& problems) {
  if (r.offset <= extent && r.size <= extent - r.offset) return;
  problems.push_back(ProcessText(p.pid) + ": multicast mapping " + Range(r.address, r.size) +
                     " of " + MulticastName(r.id) + " at offset " + std::to_string(r.offset) +
                     " lies outside the object's extent (" + std::to_string(extent) + " bytes)");
}

/// The facts of the object `r` names when its team has exactly one creator; null otherwise
/// (the team rules reported it already).
const MulticastFacts* OneCreatorTeam(const MulticastObjects& objects, const Record& r) {
  const auto it = objects.find(r.id);
  return it == objects.end() || it->second.creators.size() != 1 ? nullptr : &it->second;
}

/// The rule "every device `p` added is bound": a checkpoint needs every device of a team bound.
void CheckDevicesBound(const ParticipantView& p, const MulticastObjects& objects,
                       std::vector<std::string>& problems) {
  for (const auto& r : p.records) {
    if (!Is(r, RecordKind::kMulticastDevice) || OneCreatorTeam(objects, r) == nullptr) continue;
    const bool is_bound = std::any_of(p.records.begin(), p.records.end(), [&](const Record& b) {
      return Is(b, RecordKind::kMulticastBinding) && b.id == r.id && b.device == r.device;
    });
    if (!is_bound) {
      problems.push_back(ProcessText(p.pid) + ": device " + std::to_string(r.device) + " of " +
                         MulticastName(r.id) + " was added but nothing is bound for it; a "
                         "checkpoint needs every device of a team bound");
    }
  }
}

/// Bindings and multicast mappings of `p`, against their object's team and extent; then its
/// device adds, against its bindings.
void CheckTeamMember(const ParticipantView& p, const MulticastObjects& objects,
                     std::vector<std::string>& problems) {
  for (const auto& r : p.records) {
    const MulticastFacts* facts = OneCreatorTeam(objects, r);
    if (facts == nullptr) continue;
    if (Is(r, RecordKind::kMulticastBinding)) {
      CheckBinding(p, r, *facts, problems);
    } else if (Is(r, RecordKind::kMulticastMapping)) {
      CheckMulticastMapping(p, r, facts->extent, problems);
    }
  }
  CheckDevicesBound(p, objects, problems);
}

/// Complete teams only (SPEC-REFERENCE H.1 rules 3-6 and the whole-topology rules): exactly
/// one creator; every member reports the same requested properties; the distinct (process,
/// device) adds number exactly the object's numDevices (a member outside the participants,
/// e.g. one started without cusnap, leaves the team partial); every added device is bound;
/// binds and maps lie within the largest extent any participant's driver accepted (a driver
/// may round capacity up and libraries bind past the requested size: DRIVER-FACTS, public
/// reports; SPEC-REFERENCE K.3 #2).
void CheckMulticast(std::span<const ParticipantView> participants,
                    std::vector<std::string>& problems) {
  MulticastObjects objects = CollectMulticastObjects(participants, problems);
  CollectTeamDevices(participants, objects);
  for (const auto& [id, facts] : objects) CheckTeam(participants, id, facts, problems);
  CheckUnreportedObjects(participants, objects, problems);
  for (const auto& p : participants) CheckTeamMember(p, objects, problems);
}

}  // namespace

std::vector<std::string> ValidateTopology(std::span<const ParticipantView> participants) {
  std::vector<std::string> problems;
  std::map<proto::ObjectId, AllocationFacts, IdLess> allocations;

  CheckImporters(participants, problems);
  for (const auto& p : participants) {
    CheckUntracked(p, problems);
    CheckUnsupported(p, problems);
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
                         ProcessText(facts.creators[0]) + " and " + ProcessText(facts.creators[1]) +
                         "; exactly one creator per allocation");
      continue;
    }
    if (facts.creators.empty()) {
      const int user = facts.other_holders.empty() ? id.creator_pid : facts.other_holders[0];
      // A creator that released both its handle and its mappings reports nothing about the
      // allocation any more (its sharing table forgets it): the id still names it.
      if (CreatedByParticipant(participants, id)) {
        problems.push_back(CreatorReleased(id, user));
        continue;
      }
      problems.push_back(CreatorLeftOut(user, ObjectName(id), id.creator_pid));
      continue;
    }
    if (!facts.other_holders.empty() && !facts.creator_anchored) {
      problems.push_back(CreatorReleased(id, facts.other_holders[0]));
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
