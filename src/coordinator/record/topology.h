// Global topology validation: a pure function over what every participant reported in
// INSPECT (and the untracked imports from IDENTIFY). The coordinator runs it before
// anything changes; a non-empty result refuses the checkpoint with the job left running.
// Rules: DESIGN.md "Lifecycle" and SPEC-REFERENCE.md H.1.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/protocol.h"

namespace cusnap::coord {

/// What one participant reported: its identity, its live untracked imports (descriptors
/// imported that were not cusnap tickets) and its sharing table.
struct ParticipantView {
  int pid = 0;
  uint64_t start_time = 0;  ///< clock ticks since boot (/proc/<pid>/stat field 22)
  uint64_t untracked_imports = 0;  ///< how many are live (IDENTIFY arg[3])
  std::vector<proto::Record> records;  ///< INSPECT
  /// IDENTIFY's kUntrackedImport records (last, with an initializer: brace-initialized views
  /// may leave it out).
  std::vector<proto::Record> untracked{};
  /// INSPECT's live importers of what this participant created (kExport callers, by
  /// SO_PEERCRED; last, with an initializer, like `untracked`).
  std::vector<proto::Importer> importers{};
  /// INSPECT's device list: the UUID of each of the participant's own ordinals (its
  /// CUDA_VISIBLE_DEVICES applied), what the ordinals in `records` name; empty when it
  /// reported none (no records).
  std::vector<std::string> device_uuids{};
  /// IDENTIFY's entry points of memory cusnap cannot carry, one per line ("" when none; last,
  /// with an initializer).
  std::string unsupported{};
};

/// Checks every rule and returns one message per broken rule (empty: valid), in a stable
/// order: per-participant rules in participant order, then per-allocation rules in id
/// order, then multicast rules. Each message names the process and the resource:
///  - no live untracked imports: one message per import, naming its location, VA ranges
///    and the smallest size they imply (at most proto::kMaxUntrackedReported per process,
///    then one message with how many more);
///  - no use of an entry point whose memory cusnap cannot carry: one message per entry point,
///    naming the process and the entry point;
///  - known record kinds; allocations with size > 0 whose creator flag matches the id;
///    mappings with address and size != 0, at most kMaxAccess access descriptors, lying
///    inside their allocation;
///  - the participant set is closed: every live process that fetched a descriptor of a
///    participant's allocation or multicast object (its importers) is a participant, one
///    message per missing process naming what it imported (the creator's side; the
///    importer's side is the next rule's "its creator is not a participant");
///  - exactly one creator per allocation that any participant holds or maps;
///  - creator anchor: a creator still holds a handle or a mapping of every allocation that
///    another participant holds or maps (otherwise its memory cannot be saved);
///  - multicast teams complete: exactly one creator per object, member records naming a
///    known object, the same requested properties in every member, exactly numDevices
///    distinct (process, device) adds among the participants (fewer: a partial team, named
///    with its processes), every added device bound, binds of held members, binds and
///    multicast mappings within the largest extent any participant's driver accepted.
std::vector<std::string> ValidateTopology(std::span<const ParticipantView> participants);

}  // namespace cusnap::coord
