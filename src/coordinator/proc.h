// What the coordinator reads about processes from /proc: start times (to tell a process
// from a later one that reused its pid), liveness, and the process tree under a pid.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
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

/// The path of the cusnap shim (".../libcusnap.so") mapped into `pid` (/proc/<pid>/maps), ""
/// when none is or the maps cannot be read.
std::string MappedShimPath(int pid);

/// For a process with the shim loaded (MappedShimPath): the control directory its shim uses,
/// from its environment (/proc/<pid>/environ; ControlDirFor's rule, with its owner's uid).
/// nullopt when the shim is not loaded; the environment may be unreadable (another user):
/// then the rule's last choice is returned.
std::optional<std::string> ShimControlDir(int pid);

/// The control directories other than `control_dir` (and the job directories below it) that
/// live processes with the shim loaded serve their endpoints in (ShimControlDir), each with
/// those pids, ascending: where `status` and `--all` find nobody, the job was started with
/// another CUSNAP_CONTROL_DIR or XDG_RUNTIME_DIR (said, rather than "no participants" alone).
std::map<std::string, std::vector<int>> OtherShimControlDirs(const std::string& control_dir);

/// "12, 34": pids joined for a message.
std::string PidListText(const std::vector<int>& pids);

/// One line naming OtherShimControlDirs's directories and what to run there; "" when none.
std::string OtherShimControlDirsText(const std::string& control_dir);

/// `pid` followed by every descendant (children of every thread, recursively, from
/// /proc/<pid>/task/<tid>/children), parents before children. Processes that exit during
/// the walk are skipped. Empty when `pid` does not exist.
std::vector<int> ProcessTree(int pid);

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

/// The session id `pid` sees for itself (getsid(0) inside it): the last "NSsid:" value of
/// /proc/<pid>/status, one per nested PID namespace, its own namespace's last. 0 when its
/// session leader is outside its PID namespace (a job started by `docker exec` or a
/// container runtime): CRIU refuses to dump such a process ("A session leader of P is
/// outside of its pid namespace", criu/cr-dump.c). nullopt when the status is unreadable.
std::optional<int> OwnSessionId(int pid);

/// OwnSessionId's parser: the last value of the "NSsid:" line of a /proc/<pid>/status text,
/// nullopt when there is none.
std::optional<int> LastNamespaceSessionId(const std::string& status_text);

/// True when `pid` maps or holds an io_uring instance ("anon_inode:[io_uring]" in
/// /proc/<pid>/maps or among its /proc/<pid>/fd links). CRIU cannot dump one ("Unknown shit
/// 600 (anon_inode:[io_uring])", criu/proc_parse.c); libuv makes one, and torchrun's agent
/// holds one in torch 2.11 whatever its rendezvous (docs/MEASURED.md M16).
bool HoldsIoUring(int pid);

/// Every pid this process's /proc lists.
std::vector<int> AllPids();

/// `control_dir` and the job control directories below it ("<control_dir>/pidns-XXXXXX" of
/// jobs `cusnap run --pid-namespace` started, common/control_dir.h), that one first.
std::vector<std::string> JobControlDirs(const std::string& control_dir);

/// The namespace pids of `pid` (/proc/<pid>/status NSpid: this namespace's first, the
/// innermost last); empty when unreadable.
std::vector<int> NamespacePids(int pid);

/// The pid here of a live process (not a zombie), in this PID namespace or one below, that
/// is `pid` in its innermost PID namespace and whose kernel start time (ticks since boot, the
/// same in every namespace) `started_ok` accepts; 0 when there is none. Scans every process.
int FindByInnermostPid(int pid, const std::function<bool(uint64_t start_time)>& started_ok);

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

/// True when processes `a` and `b` are in the same namespace of `kind` ("mnt", "pid", ...:
/// /proc/<pid>/ns/<kind> names the same inode); true as well when either cannot be read
/// (nothing to judge by).
bool SameNamespace(const char* kind, int a, int b);

/// A pipe's write end held in a process tree whose read end no process of the tree holds.
struct PipeWrittenOutside {
  int pid = 0;
  int fd = -1;
};

/// The write ends of pipes that processes of `tree` hold and whose read end no process of the
/// tree holds while the pipe still has a reader (PipeHasReader: one outside the tree, seen
/// from here or not; /proc/<pid>/fd "pipe:[inode]", access mode from /proc/<pid>/fdinfo):
/// output to a process outside the job (`cusnap run -- job | tee log`). CRIU restores such a pipe as a new
/// one that nobody reads, so after a restore from images those writes fail (EPIPE, SIGPIPE).
std::vector<PipeWrittenOutside> PipesWrittenOutside(const std::vector<int>& tree);

/// True when the pipe whose write end is descriptor `fd` of process `pid` has a reader left
/// (its write end would not report POLLERR); false when it has none or cannot be opened.
bool PipeHasReader(int pid, int fd);

/// A file of a process that lies on a mount the process's mount namespace does not have.
struct ForeignFile {
  int fd = -1;       ///< its descriptor; -1 for the other places a process holds a file
  std::string path;  ///< as /proc/<pid> names it
  std::string what;  ///< "descriptor 3", "its working directory", "its executable", "a mapping"
};

/// Every file the process at `proc_dir` ("/proc/<pid>", or "/proc/self") holds on a mount
/// absent from its mount namespace (the file's mnt_id, from fdinfo, is not in its
/// mountinfo): its descriptors first (by number), then its working and root directories, its
/// executable and the files it maps (each file once). Files inherited from another mount
/// namespace, e.g. from the shell of a sandbox or `nsenter --wd`, or from outside a job's
/// own namespace. CRIU dumps every one of them the same way and cannot dump these ("Can't
/// lookup mount=N for fd=F", criu/files-reg.c), and finds that out only after the checkpoint.
/// Pipes, sockets, memfds, shared anonymous and deleted mappings live on the kernel's
/// internal mounts, which no namespace lists: they are not named. A mapping whose file
/// cannot be opened through /proc/<pid>/map_files (it needs CAP_SYS_ADMIN) is not judged.
std::vector<ForeignFile> FilesOnForeignMounts(const std::string& proc_dir);

/// The command name of `pid` (/proc/<pid>/comm), "?" when unreadable; for messages.
std::string ProcessName(int pid);

}  // namespace cusnap::coord
