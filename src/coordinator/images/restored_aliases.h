// The start-time alias files an images restore writes (common/ids.h, RestoredAliasPath): how
// a process CRIU brought back is known as the dumped process it replaces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cusnap::coord {

/// One start-time alias file (common/ids.h, RestoredAliasPath): the restored process `pid`
/// (as its own PID namespace numbers it) started at `outside` (as the kernel counts it here)
/// and `inside` (as its tree's time namespace reads it), and had `original` when dumped.
struct RestoredAlias {
  std::string path;
  int pid = 0;
  uint64_t outside = 0, inside = 0, original = 0;
};

/// The aliases in <dir>/restored of every JobControlDirs(control_dir) dir; files that are
/// not aliases are left out.
std::vector<RestoredAlias> RestoredAliases(const std::string& control_dir);

/// The start-time aliases (RestoredAliases) whose process is gone: no process in this /proc
/// started at either new start time the alias records (its pid may be one of a PID
/// namespace of the job's own, which means another process here; start times mean the same
/// everywhere). The images restore writes one per restored process; `cusnap status --prune`
/// removes the stale ones.
std::vector<std::string> StaleRestoredAliases(const std::string& control_dir);

/// The pid here of a live process that a restore (`restore --images-dir`, in any PID
/// namespace, from any copy of the images) made of the dumped process `pid` that started at
/// `original`: an alias under `control_dir` names it, and a process here started at the
/// alias's new start time and is `pid` in its innermost PID namespace. 0 when none runs.
int RunningRestoredCopy(const std::string& control_dir, int pid, uint64_t original);

}  // namespace cusnap::coord
