// What CRIU cannot dump, judged from /proc before anything changes: a session leader outside
// the job's PID namespace, io_uring instances, pipes written to a reader outside the job, and
// files on mounts the process's mount namespace does not have (docs/DUMP.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cusnap::coord {

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

}  // namespace cusnap::coord
