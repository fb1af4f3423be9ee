// CRIU, the program that writes a process tree to disk and brings it back (criu.org), as
// `cusnap dump` and `cusnap restore --images-dir` run it: where it is found, and the options
// cusnap sets for a job's tree (docs/DUMP.md says why each).
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// Set (to 1) in the environment of every CRIU that cusnap runs: libcusnap_criu.so, the
/// CRIU plugin, then leaves the run to cusnap (a job is driven by `cusnap dump` or by the
/// plugin, never both).
inline constexpr const char* kCusnapRunsCriuVariable = "CUSNAP_DUMP_RUNS_CRIU";

/// What CRIU prints (stdout and stderr) in an images directory: the only trace of a CRIU that
/// failed before it opened its own log (RunCriu).
inline constexpr const char* kCriuOutputLogName = "criu-output.log";

/// The criu program: $CUSNAP_CRIU when set (it must be executable), else `criu` on PATH.
/// Error (ENOENT) saying how to get one (scripts/fetch_criu.sh) when there is none.
Result<std::string> FindCriu();

/// `criu --version`'s first line ("Version: 4.2.1"); Error with CRIU's own output when it
/// does not run.
Result<std::string> CriuVersion(const std::string& criu);

/// The version number of CriuVersion's line ("Version: 4.2.1" -> "4.2.1"); the line as it is
/// when it has no such prefix (a CRIU that words it otherwise).
std::string CriuVersionNumber(const std::string& version_line);

/// Why CRIU could not dump process `pid`, as the end of a sentence naming it ("has its
/// session leader outside ..."), or "" when nothing cusnap knows of stops it. Checked for
/// every process of the tree before a dump changes anything: CRIU finds these only after
/// the checkpoint took the GPUs away. The kinds: a session leader outside the process's PID
/// namespace (OwnSessionId 0: "A session leader of P is outside of its pid namespace",
/// criu/cr-dump.c), an io_uring instance (HoldsIoUring), a file opened in another mount
/// namespace (FilesOnForeignMounts: "Can't lookup mount"). Every kind that applies is named,
/// joined by "; and it ".
std::string WhyCriuCannotDump(int pid);

/// The arguments of `criu dump` for the tree under `root_pid` into `dir`: established TCP
/// connections (the job's loopback store), external unix sockets (endpoints of processes
/// outside the tree), file locks, unlinked-but-open files (unlinked /dev/shm files), a shell
/// job (a root started by a terminal session); `leave_running` keeps the tree alive.
/// $CUSNAP_CRIU_OPTS (space-separated) is appended, e.g. "--network-lock nftables".
std::vector<std::string> CriuDumpArgs(int root_pid, const std::string& dir, bool leave_running);

/// The arguments of `criu restore` from `dir`, detached (-d), the root's pid written to
/// <dir>/restored.pid, every process left stopped (--leave-stopped): none runs application
/// code before the restore checked CRIU's page images (read beside CRIU) and continues it.
std::vector<std::string> CriuRestoreArgs(const std::string& dir);

/// Runs `criu` with `args`, its own output to <dir>/<log_name>. Error (code: its exit status)
/// carrying the log's error lines when it fails.
Status RunCriu(const std::string& criu, const std::vector<std::string>& args,
               const std::string& dir, const std::string& log_name);

/// CRIU's log of a restore, in the images directory.
inline constexpr const char* kCriuRestoreLogName = "criu-restore.log";

/// The pid a failed `criu restore` from `dir` could not give back because another process
/// took it after cusnap checked that it was free ("Can't fork for <pid>: File exists" in
/// kCriuRestoreLogName), or 0. A restore run again then restores the job in a PID namespace
/// of its own.
int CriuRestorePidTaken(const std::string& dir);

/// The pid <dir>/restored.pid names (the restored tree's root, in our PID namespace).
Result<int> RestoredRootPid(const std::string& dir);

}  // namespace cusnap::coord
