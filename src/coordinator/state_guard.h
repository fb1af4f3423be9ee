// Keeps a checkpoint from destroying another job's checkpoint: before anything changes, the
// state file already in the state directory (if any) is read, and a checkpoint of other
// processes that may still need it (they exist with the recorded start time: checkpointed,
// or running again) is refused: a second job pointed at the same --state-dir would otherwise
// make the first one unrestorable. And the directory itself: what cusnap creates it creates
// mode 0700, what exists it never re-modes (`--state-dir /tmp` as root must not turn /tmp
// into 0700), and one that others could write into is refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// A process as a state file records it: pid and start time (clock ticks since boot,
/// /proc/<pid>/stat field 22), which together tell it from a later process with its pid.
struct ProcessIdentity {
  int pid = 0;
  uint64_t start_time = 0;
  bool operator==(const ProcessIdentity&) const = default;
};

/// How refusals name the directory a state file goes into, and the option that chooses it:
/// a checkpoint's state directory (--state-dir), or a dump's images directory (--images-dir),
/// which holds the state file beside CRIU's images (a dump's refusals must not speak of a
/// state directory and --state-dir, which `dump` does not take).
struct DirectoryRole {
  const char* noun;
  const char* option;
};
inline constexpr DirectoryRole kStateDirectory{"state directory", "--state-dir"};
inline constexpr DirectoryRole kImagesDirectory{"images directory", "--images-dir"};

/// Whether a checkpoint of `job` may write its state file into `state_dir`. Ok when the
/// directory holds no state file, or one of the same job (a second cycle), or one whose
/// other processes are all gone (none exists now with the recorded start time). An Error
/// naming the directory and what to do otherwise: the file belongs to another job with a
/// process still alive (its pids named), or it exists but cannot be read or parsed (it is
/// not destroyed either).
Status CheckStateDirOwner(const std::string& state_dir, const std::vector<ProcessIdentity>& job,
                          DirectoryRole role = kStateDirectory);

/// Makes `state_dir` ready to hold a state file, changing no existing directory: each
/// missing component is created with mode 0700 (mkdir, umask aside; nothing is chmod-ed). An
/// Error naming the directory and the reason when it cannot be created, or when it exists
/// and is unsafe: not a directory, not owned by this (effective) user, or writable by group
/// or others, sticky or not (another user could then plant or swap files next to the
/// checkpoint; /tmp is refused: use a directory below it). Each directory it created is
/// appended to `created` (parents first), so that a refusal can take them away again.
/// `role` names the directory in the Error.
Status EnsureStateDir(const std::string& state_dir, std::vector<std::string>* created = nullptr,
                      DirectoryRole role = kStateDirectory);

}  // namespace cusnap::coord
