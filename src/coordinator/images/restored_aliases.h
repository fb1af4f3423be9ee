// The start-time alias files an images restore writes (common/ids.h, RestoredAliasPath): how
// a process CRIU brought back is known as the dumped process it replaces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// One start-time alias file (common/ids.h, RestoredAliasPath): the restored process `pid`
/// (as its own PID namespace numbers it) started at `outside` (as the kernel counts it here)
/// and `inside` (as its tree's time namespace reads it), and had `original` when dumped.
struct RestoredAlias {
  std::string path;
  int pid = 0;
  uint64_t outside = 0, inside = 0, original = 0;
};

/// The start times of `pids` as a process in the time namespace of `ns_pid` reads them in
/// /proc (CRIU restores a tree into a time namespace of its own, and /proc shifts start
/// times by the reader's boot-time offset: common/ids.h). Read by a forked child that joins
/// that namespace (setns needs a single-threaded caller); 0 for each one it could not read.
std::vector<uint64_t> StartTimesSeenFrom(int ns_pid, const std::vector<int>& pids);

/// Writes the alias (common/ids.h, RestoredAliasPath) that gives process `pid` (as this PID
/// namespace numbers it) its identity start time `original` back: "<its kernel start time
/// now> <inside> <original>" into <control_dir>/restored/<pid>, durably. `inside` is its
/// start time as its tree's time namespace reads it (StartTimesSeenFrom). ESRCH when the
/// process is gone; errno-coded Errors naming the file otherwise.
Status WriteRestoredAlias(const std::string& control_dir, int pid, uint64_t inside,
                          uint64_t original);

/// Takes process `pid` (as this PID namespace numbers it) as the one whose identity start
/// time was `original`, when CRIU brought it back without cusnap (a container engine's
/// checkpoint and restore without the plugin): its shim, restored with its memory, answers
/// its endpoint as that process (the endpoint client checked that `pid` itself answers), the
/// kernel gives it a later start time, and no alias names it. Writes its alias
/// (WriteRestoredAlias) into `control_dir` and returns true; false when it is not such a
/// process (its start time is not later than `original`: a stale endpoint); errno-coded
/// Errors of WriteRestoredAlias.
Result<bool> AdoptRestoredProcess(const std::string& control_dir, int pid, uint64_t original);

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
