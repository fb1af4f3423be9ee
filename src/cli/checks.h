// Checks `cusnap` makes before a command acts, so that a mistake is named before anything
// changes: the settings it and the shim read from the environment, the `--pid`
// target, the control directory, and endpoint sockets left behind. Each check returns "" when
// all is well, else the message to print.
#pragma once

#include <string>
#include <vector>

namespace cusnap::cli {

/// The settings `command` reads (common/settings.h: its readers) whose values in the
/// environment the table does not take, each as "NAME='value' is not <what it takes>". `run`
/// and `demo` check every setting of the table: the job they start inherits them all, and
/// the shim and the cusnap commands it may run read them. None for a word that names no
/// command.
std::vector<std::string> SettingsProblemsOf(const std::string& command);

/// The `--pid` of checkpoint/restore/status before any driver is loaded or endpoint is
/// contacted: the pid exists, is a process and not one of its threads ("pid T is thread T of
/// process P"), belongs to this user (else, unless root finds its endpoints, the control
/// directory searched is named, with CUSNAP_CONTROL_DIR), the control directory `control_dir` is readable, and no process of
/// its tree has an endpoint socket left by an earlier process with its pid. "" when fine.
std::string CheckTargetPid(int pid, const std::string& control_dir);

/// Whether `control_dir` can be listed and trusted: "" when it can or does not exist, else
/// why not (unsafe: not ours, not 0700, a symbolic link (control_dir.h); or "cannot read
/// control directory D: <strerror>").
std::string CheckControlDirReadable(const std::string& control_dir);

/// For `cusnap run`: the endpoint socket path <control_dir>/<pid>.sock of any pid must fit a
/// unix socket address (sun_path, 108 bytes with its NUL). "" when it does, else a message
/// naming the directory, its length and the limit.
std::string CheckControlDirLength(const std::string& control_dir);

/// An endpoint socket whose process is gone: `pid` no longer exists or is a zombie (exited,
/// not reaped), or it was reused by a later process (the socket is older than that process).
struct StaleEndpoint {
  int pid = 0;
  std::string path;
  bool reused = false;  ///< the pid exists again, as another process
  bool job_dir = false; ///< in a job control directory: `pid` is of the job's PID namespace
};

/// Every stale endpoint socket "<pid>.sock" in `control_dir` (none when it cannot be read),
/// and in the job control directories below it (coord::JobControlDirs) every socket nothing
/// listens on (a job `cusnap dump` took away leaves them; its restore binds them anew).
std::vector<StaleEndpoint> StaleEndpoints(const std::string& control_dir);

/// Whether process `pid` listens on its endpoint "<pid>.sock" in `control_dir` now (a live
/// cusnap process of this PID namespace; a socket file left by a dumped job is not).
bool ServesEndpoint(const std::string& control_dir, int pid);

/// An endpoint served by a process of another PID namespace (a job `restore --images-dir`
/// brought back in a namespace of its own, cli/pid_namespace.h): named by its pid there,
/// listened on by `pid_here` as this process numbers it.
struct ForeignEndpoint {
  int pid_there = 0;
  int pid_here = 0;
  std::string path;
};

/// Every endpoint socket in `control_dir`, and in the job control directories below it
/// (common/control_dir.h: jobs `cusnap run --pid-namespace` started), whose listener's pid
/// here is not the one in its name: a job in a PID namespace of its own (none when the
/// directory cannot be read).
std::vector<ForeignEndpoint> ForeignEndpoints(const std::string& control_dir);

/// "its process no longer exists" / "its process has exited (a zombie its parent, pid Q, has
/// not reaped)" / "pid P was reused by a later process (<name>)".
std::string StaleReason(const StaleEndpoint& stale);

}  // namespace cusnap::cli
