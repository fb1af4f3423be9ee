// The record of a `cusnap restore --images-dir` in progress, in the images directory: what
// lets a later command find the processes CRIU brought back when the restore that asked for
// them was killed before it gave them their identity (kill -9 of the restore while or after
// CRIU ran leaves the job stopped, and without the record no command could finish it).
//
// The record (<images dir>/.cusnap-restoring) holds the kernel start time of the restore
// that wrote it, and that restore holds an flock on it from before CRIU runs until every
// restored process has its start-time alias (common/ids.h). A record whose lock nobody holds
// is an interrupted restore; every process CRIU made for it started after that time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/unique_fd.h"

namespace cusnap::coord {

struct Manifest;

/// The record's file name in the images directory (a dot file: never hashed, images.h).
inline constexpr const char* kRestoreRecordName = ".cusnap-restoring";

/// Creates (or, with `resuming`, takes over) the record of a restore from `dir` and locks it
/// for as long as the returned descriptor stays open; a fresh record holds this process's
/// kernel start time. Error EBUSY when another process holds the lock (a restore from `dir`
/// runs now), or the errno of the failed open or write (naming the file).
Result<UniqueFd> BeginRestoreRecord(const std::string& dir, bool resuming);

/// Removes the record `lock` (BeginRestoreRecord) holds, then drops the lock. Error names the
/// file when it cannot be removed.
Status EndRestoreRecord(const std::string& dir, UniqueFd& lock);

/// An earlier restore from a directory (its record).
struct EarlierRestore {
  bool running = false;     ///< its process still holds the lock: it runs now
  uint64_t started = 0;     ///< its kernel start time (ticks since boot)
};

/// The record of an earlier restore from `dir`; nullopt when there is none (or it cannot be
/// read: a record cut short by a crash before its time was written is no record).
std::optional<EarlierRestore> ReadRestoreRecord(const std::string& dir);

/// The pid here of the root of the tree an interrupted restore (ReadRestoreRecord) had CRIU
/// bring back from `manifest`: a live process, in this or any PID namespace below, that is the
/// dump's root pid in its innermost namespace and started after `started`. 0 when there is
/// none (CRIU failed, and a failed CRIU restore leaves no process behind, or the tree ended).
int InterruptedRestoreRoot(const Manifest& manifest, uint64_t started);

}  // namespace cusnap::coord
