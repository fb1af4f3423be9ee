// The hold marker (coordinator/participants/hold.h): <control dir>/<pid>.held says that cusnap stopped
// process <pid> to hold its checkpointed job, and names that very process. The coordinator
// writes it before its SIGSTOP; a held shim whose command died writes it before stopping
// itself again (shim/lifecycle/lifecycle.h, "the hold after a command"). One format for both,
// here: "<start time> <PID namespace>[ <phase>]\n", the start time as ProcessStartTime gives
// it (common/ids.h), the PID namespace as the inode of /proc/self/ns/pid of the writer, which
// runs in the namespace of the pid in the marker's name, and, from a shim that held itself,
// its lifecycle phase (a ShimState name; the coordinator's markers name none: RELEASED).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"

namespace cusnap {

/// What a marker records.
struct HoldMarker {
  uint64_t start_time = 0;     ///< ProcessStartTime ticks of the held process
  uint64_t pid_namespace = 0;  ///< inode of its PID namespace; 0 in markers older than it
  std::string phase;           ///< ShimState name when the shim held itself; "" otherwise
};

/// The hold marker of process `pid` in control directory `dir`: "<dir>/<pid>.held". It
/// exists while `cusnap checkpoint` holds the process stopped (coordinator/participants/hold.h);
/// the shim's hold guard reads it (shim/hold/hold_guard.h).
std::string HeldMarkerPath(const std::string& dir, int pid);

/// This process's PID namespace: the inode of /proc/self/ns/pid (0 when unreadable).
uint64_t OwnPidNamespace();

/// Writes `marker` to `path` (mode 0600, through <path>.tmp and rename, so a reader never
/// sees half of it). Error code: errno, naming the file.
Status WriteHoldMarker(const std::string& path, const HoldMarker& marker);

/// The marker at `path`; nullopt when there is none or it holds no start time.
std::optional<HoldMarker> ReadHoldMarker(const std::string& path);

}  // namespace cusnap
