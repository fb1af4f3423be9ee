// Where a checkpointed process's checkpoint is: <control dir>/<pid>.checkpoint, written by
// `cusnap checkpoint` for every participant once the checkpoint succeeded, and removed by the
// restore or recover that finishes it. It holds "<start time> <state directory>\n" (the start
// time as ProcessStartTime gives it), so a pid reused by a later process never names one.
// `status` reads it to show the job's state directory and the participants missing from the
// job, and `restore` to suggest the --state-dir it was not given.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// The pointer file of `pid` in `control_dir`.
std::string CheckpointPointerPath(const std::string& control_dir, int pid);

/// Writes the pointer of `pid` (started at `start_time`) to `state_dir` (made absolute), mode
/// 0600, through a temporary file and rename. Error code: errno, naming the file.
Status WriteCheckpointPointer(const std::string& control_dir, int pid, uint64_t start_time,
                              const std::string& state_dir);

/// The state directory the pointer of `pid` names, when there is one and the process holding
/// `pid` now is the one it was written for; nullopt otherwise.
std::optional<std::string> CheckpointStateDirOf(const std::string& control_dir, int pid);

/// The pointer files in `control_dir` whose process ended (or whose pid another process has
/// now): a checkpointed job killed leaves them, and `status --prune` removes them. Paths, in
/// directory order.
std::vector<std::string> StaleCheckpointPointers(const std::string& control_dir);

/// Removes the pointers of `pids` (those absent are fine).
void RemoveCheckpointPointers(const std::string& control_dir, const std::vector<int>& pids);

}  // namespace cusnap::coord
