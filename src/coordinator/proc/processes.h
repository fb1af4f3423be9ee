// What the coordinator reads about processes from /proc: start times (to tell a process
// from a later one that reused its pid), liveness, states, namespaces and the process tree
// under a pid. The bottom room of the coordinator: it knows nothing of endpoints or CRIU.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cusnap::coord {

/// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22), or nullopt
/// when the process does not exist. The same value the shim reports in kIdentify.
std::optional<uint64_t> ProcessStartTime(int pid);

/// Whether the process that started at `start_time` (ProcessStartTime's ticks) still runs
/// as `pid`: the pid exists with that start time and is not a zombie (a process whose held,
/// stopped parent cannot reap it has exited all the same).
bool AliveHere(int pid, uint64_t start_time);

/// The state letter of `pid` (/proc/<pid>/stat field 3: R, S, D, T stopped, t traced, Z,
/// ...), or nullopt when the process does not exist.
std::optional<char> ProcessState(int pid);

/// The state letter of `pid` when it is stopped: 'T' (SIGSTOP, Ctrl-Z, cusnap's hold) or 't'
/// (a debugger or tracer); nullopt when it runs, sleeps or does not exist.
std::optional<char> StoppedState(int pid);

/// "pid P (name) is stopped (state T), not by cusnap: its endpoint cannot answer; continue it
/// ('kill -CONT P')": a process stopped by someone else (SIGSTOP, a debugger, a shell's
/// Ctrl-Z) is named at once, rather than after its endpoint's deadline.
/// State 't' (a tracer's stop) is told to let the debugger continue it or detach it.
std::string StoppedText(int pid, char state = 'T');

/// True when `pid` is a zombie (/proc/<pid>/stat state Z or X): it exited and its parent
/// has not reaped it; its endpoint socket answers no one.
bool IsZombie(int pid);

/// True when `pid` no longer runs: it does not exist, or it is a zombie.
bool ProcessExited(int pid);

/// Why an exited `pid` is gone, for messages after a subject: "no longer exists", or "has
/// exited (a zombie its parent, pid P, has not reaped)".
std::string ExitedText(int pid);

/// "12, 34": pids joined for a message.
std::string PidListText(const std::vector<int>& pids);

/// `pid` followed by every descendant (children of every thread, recursively, from
/// /proc/<pid>/task/<tid>/children), parents before children. Processes that exit during
/// the walk are skipped. Empty when `pid` does not exist.
std::vector<int> ProcessTree(int pid);

/// Keeps `proc_fd`, a descriptor of the /proc of the PID namespace the user ran cusnap in,
/// opened before this process joined or made a job's PID and mount namespaces (its /proc
/// shows the job's pids from then on); CallerPidOf reads it. Takes ownership.
void KeepCallerProc(int proc_fd);

/// The pid the user's PID namespace (KeepCallerProc's /proc) gives the process of this PID
/// namespace that this process's /proc calls `pid` (its NSpid there ends in `pid`); `pid`
/// itself when no caller /proc is kept, 0 when none is found. Matches are remembered.
int CallerPidOf(int pid);

/// Every pid this process's /proc lists.
std::vector<int> AllPids();

/// The pid a file named "<pid><suffix>" is for (a control directory's "123.sock",
/// "123.checkpoint"; suffix "" for a bare "123"): 1 to 9 digits, above 0; nullopt for any
/// other name.
std::optional<int> PidOfFileName(std::string_view name, std::string_view suffix);

/// The namespace pids of `pid` (/proc/<pid>/status NSpid: this namespace's first, the
/// innermost last); empty when unreadable.
std::vector<int> NamespacePids(int pid);

/// The pid here of a live process (not a zombie), in this PID namespace or one below, that
/// is `pid` in its innermost PID namespace and whose kernel start time (ticks since boot, the
/// same in every namespace) `started_ok` accepts; 0 when there is none. Scans every process.
int FindByInnermostPid(int pid, const std::function<bool(uint64_t start_time)>& started_ok);

/// True when processes `a` and `b` are in the same namespace of `kind` ("mnt", "pid", ...:
/// /proc/<pid>/ns/<kind> names the same inode); true as well when either cannot be read
/// (nothing to judge by).
bool SameNamespace(const char* kind, int a, int b);

/// The command name of `pid` (/proc/<pid>/comm), "?" when unreadable; for messages.
std::string ProcessName(int pid);

}  // namespace cusnap::coord
