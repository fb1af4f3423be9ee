// Where participants' endpoints are: the sockets "<pid>.sock" of a control directory and
// the job control directories below it, and the shim mapped into a process with the control
// directory its environment gives it (what `status` and `--all` look through).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cusnap::coord {

/// The path of the cusnap shim (".../libcusnap.so") mapped into `pid` (/proc/<pid>/maps), ""
/// when none is or the maps cannot be read.
std::string MappedShimPath(int pid);

/// For a process with the shim loaded (MappedShimPath): the control directory its shim uses,
/// from its environment (/proc/<pid>/environ; ControlDirFor's rule, with its owner's uid).
/// nullopt when the shim is not loaded; the environment may be unreadable (another user):
/// then the rule's last choice is returned.
std::optional<std::string> ShimControlDir(int pid);

/// The control directories other than `control_dir` (and the job directories below it) that
/// live processes with the shim preloaded (LD_PRELOAD, as `cusnap run` starts a job) serve
/// their endpoints in (ShimControlDir), each with
/// those pids, ascending: where `status` and `--all` find nobody, the job was started with
/// another CUSNAP_CONTROL_DIR or XDG_RUNTIME_DIR, which "no participants" alone would hide.
std::map<std::string, std::vector<int>> OtherShimControlDirs(const std::string& control_dir);

/// What to do about processes of a tree (`pids`) that have no endpoint in `control_dir`: when
/// one has the shim loaded, the control directory its environment gives (the job was started
/// with another CUSNAP_CONTROL_DIR or XDG_RUNTIME_DIR), or that its shim could not start its
/// endpoint; "" when no process of `pids` has the shim loaded.
std::string ShimElsewhere(const std::vector<int>& pids, const std::string& control_dir);

/// "pid P: no process in its tree has a cusnap endpoint in D; <ShimElsewhere, else: start the
/// job with 'cusnap run'>", for `pid` and its process tree `tree`.
std::string NoEndpointInTreeText(int pid, const std::vector<int>& tree,
                                 const std::string& control_dir);

/// One line naming OtherShimControlDirs's directories and what to run there; "" when none.
std::string OtherShimControlDirsText(const std::string& control_dir);

/// Pids that have an endpoint socket "<pid>.sock" in `control_dir` and run. Stale sockets
/// of exited processes (gone, or zombies) are left out.
std::vector<int> EndpointPids(const std::string& control_dir);

/// Pids whose endpoint socket "<pid>.sock" is still in `control_dir` though the process
/// exited (ProcessExited: it died without removing it, or is an unreaped zombie).
std::vector<int> StaleEndpointPids(const std::string& control_dir);

/// True when <control_dir>/<pid>.sock exists and is a socket (an endpoint, live or stale).
bool HasEndpoint(const std::string& control_dir, int pid);

/// The pids of `pid`'s process tree (ProcessTree order) that have an endpoint and run,
/// leaving out the calling process and exited ones (zombies).
std::vector<int> EndpointPidsInTree(const std::string& control_dir, int pid);

/// `control_dir` and the job control directories below it ("<control_dir>/pidns-XXXXXX" of
/// jobs `cusnap run --pid-namespace` started, common/control_dir.h), that one first.
std::vector<std::string> JobControlDirs(const std::string& control_dir);

}  // namespace cusnap::coord
