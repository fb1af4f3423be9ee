// A job in a PID namespace of its own (to restore a dumped job while other processes hold
// its pids). CRIU gives every restored process its pid back; on the machine's PID
// namespace a pid held by another process makes that impossible ("File exists"). In a new
// PID namespace every pid is free, as in a container: `restore --images-dir` makes one when a
// pid of the dump is taken (or when asked with --pid-namespace), with a small init as its pid
// 1 that stays as long as the job. Inside, the job keeps the pids it had: its endpoints, its
// tickets and the state file name them, so every later command on it (status, checkpoint,
// restore, recover, dump) runs in the job's PID and mount namespaces (the mount namespace
// holds the /proc of those pids): given `--pid` of one of its processes as this machine
// sees it (the root for the whole job; another names its subtree, as for any job), cusnap
// joins them in a child and works there.
#pragma once

#include <functional>
#include <string>

#include <sys/types.h>

namespace cusnap::cli {

/// A new PID namespace (with a mount namespace whose /proc shows it), `command` run in it as
/// pid 2 under an init (pid 1, a session leader) that reaps every orphan and stays until the
/// last process in it ends. Returns `command`'s exit status; `init_pid` gets the init's pid
/// as this process sees it (0 when no namespace could be made: then the status is
/// kExitRestoreRefused and `why` says why). SIGINT and SIGTERM are passed on to `command`.
/// `command` and whatever it starts get pids from `first_own_pid` on (above every pid and
/// thread id the job will be given back). Needs CAP_SYS_ADMIN; call it with no other thread
/// running.
int RunInNewPidNamespace(const std::function<int()>& command, int first_own_pid, int& init_pid,
                         std::string& why);

/// The word `cusnap <word> <command pid> <status fd>` runs the init of a PID namespace
/// RunInNewPidNamespace made with (it runs cusnap again once inside its namespaces).
inline constexpr const char* kNamespaceInitCommand = "pid-namespace-init";

/// The init RunInNewPidNamespace starts, in the program it runs again: waits for `command`
/// (a pid, decimal), writes its exit status to descriptor `status_fd`, then reaps every
/// orphan until the namespace is empty. Never returns.
[[noreturn]] void ServeAsNamespaceInit(const char* command, const char* status_fd);

/// The pid, as this process sees it, of the process that is `ns_pid` in the PID namespace
/// whose init is `init_pid`; 0 when none is.
int HostPidOf(int init_pid, int ns_pid);

/// The job `pid` names: when `pid` is the init cusnap made for a job's PID namespace, the
/// job's root under it; when a child of `pid` is the init of a PID namespace (pid 1 there:
/// the `cusnap run --pid-namespace` process, a shell's $!), that init's first child;
/// otherwise `pid` itself (each as this process numbers it).
int JobRootUnder(int pid);

/// When the processes of `pid`'s tree keep their endpoints in a job control directory below
/// this user's (control_dir.h, IsJobControlDir: a `cusnap run --pid-namespace` job), makes it
/// this command's CUSNAP_CONTROL_DIR. Anything else changes nothing.
void AdoptJobControlDir(int pid);

/// waitpid of `child` as an exit status: its own, or 128+N when signal N ended it.
int ExitStatusOf(pid_t child);

/// When `pid` (as this process sees it) runs in another PID namespace than this process:
/// `command(its pid there)` in a child that joined its PID and mount namespaces (working
/// directory kept: the same path when it exists there, else this one through a descriptor;
/// the driver's libraries are this machine's, mapped before the join), SIGINT and SIGTERM
/// passed on; returns the child's exit status (128+N
/// when signal N ended it), or kExitError after saying on stderr why the namespaces cannot be
/// joined. Otherwise `command(pid)` here. Call it with no other thread running.
int InPidNamespaceOf(const char* command_name, int pid, const std::function<int(int)>& command);

}  // namespace cusnap::cli
