// `cusnap run`: start a command with the shim preloaded (DESIGN.md, "Environment").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/checks.h"
#include "cli/pid_namespace.h"
#include "cli/commands.h"
#include "cli/version.h"
#include "cli/exit_codes.h"
#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "coordinator/native/native_driver.h"
#include "coordinator/images/criu_preconditions.h"

namespace cusnap::cli {
namespace {

/// Sets `name` to `first` followed by its old value (separated by `sep`), if any.
void Prepend(const char* name, const std::string& first, char sep) {
  const char* old = std::getenv(name);
  std::string value = first;
  if (old && *old) value += sep + std::string(old);
  ::setenv(name, value.c_str(), 1);
}

/// execvp of `command`; returns (after saying why) only when it could not be executed: 127
/// when the program is not found, 126 otherwise (the shell's convention).
int Exec(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "cusnap run: cannot execute %s: %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

/// Reopens, by their paths, the files this process holds on mounts its mount namespace does
/// not have (coord::FilesOnForeignMounts): files inherited from another mount namespace (a
/// sandbox's shell), or from before it entered one of its own. CRIU cannot dump them ("Can't
/// lookup mount=N for fd=0 path=/dev/null"), so a `cusnap dump` of the job would fail. The
/// same file is opened again with the same status flags (and offset, and close-on-exec
/// flag) and put in place of the old descriptor; anything that does not reopen as the same
/// file is left as it is (`cusnap dump` then refuses, naming it).
void ReopenForeignFilesHere() {
  for (const auto& [fd, target, what] : coord::FilesOnForeignMounts("/proc/self")) {
    if (fd < 0) continue;  // not a descriptor: nothing to open again
    struct stat was {};
    if (::fstat(fd, &was) != 0 || (!S_ISREG(was.st_mode) && !S_ISCHR(was.st_mode))) continue;
    const int status = ::fcntl(fd, F_GETFL);
    const int fd_flags = ::fcntl(fd, F_GETFD);
    if (status < 0 || fd_flags < 0) continue;
    const int again = ::open(target.c_str(), (status & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_NOCTTY);
    struct stat now {};
    if (again < 0) continue;
    if (::fstat(again, &now) != 0 || now.st_dev != was.st_dev || now.st_ino != was.st_ino) {
      ::close(again);
      continue;
    }
    if (S_ISREG(was.st_mode) && (status & O_APPEND) == 0) {
      ::lseek(again, ::lseek(fd, 0, SEEK_CUR), SEEK_SET);
    }
    ::dup3(again, fd, (fd_flags & FD_CLOEXEC) != 0 ? O_CLOEXEC : 0);
    ::close(again);
  }
}

/// `command` in a PID namespace of its own, as pid getpid() there (a pid this process holds
/// here, so the job's root pid means the same process on both sides), its endpoints in a
/// control directory of its own (their names are pids of that namespace). Returns its exit
/// status, or kExitError after saying why the namespace could not be made.
int RunInOwnPidNamespace(const std::vector<std::string>& command) {
  auto dir = MakeJobControlDir(ControlDir());
  if (!dir) {
    std::fprintf(stderr, "cusnap run: %s; the job was not started\n", dir.error().message.c_str());
    return kExitError;
  }
  if (const std::string problem = CheckControlDirLength(*dir); !problem.empty()) {
    std::fprintf(stderr, "cusnap run: %s; the job was not started\n", problem.c_str());
    ::rmdir(dir->c_str());
    return kExitUsage;
  }
  ::setenv("CUSNAP_CONTROL_DIR", dir->c_str(), 1);
  int init_pid = 0;
  std::string why;
  const int rc = RunInNewPidNamespace(
      [&] {
        ReopenForeignFilesHere();
        return Exec(command);
      },
      ::getpid(), init_pid, why);
  if (init_pid == 0) {
    std::fprintf(stderr, "cusnap run: %s; the job was not started\n", why.c_str());
    ::rmdir(dir->c_str());
    return kExitError;
  }
  // Empty once every process of the job ended as usual (each shim removes its endpoint); a
  // job dumped to disk left its sockets there, for its restore.
  ::rmdir(dir->c_str());
  return rc;
}

}  // namespace

int RunCommand(const std::vector<std::string>& command, bool pid_namespace) {
  const std::string bin = SelfDir();
  const std::string shim = ShimPath();
  // Before the job starts: its shim could not create its endpoint there, and would say so
  // only on the job's stderr.
  if (const std::string problem = CheckControlDirLength(ControlDir()); !problem.empty()) {
    std::fprintf(stderr, "cusnap run: %s\n", problem.c_str());
    return kExitUsage;
  }
  // Nor in a directory it must not trust: not ours, not 0700, a symbolic link.
  if (const std::string unsafe = UnsafeControlDir(ControlDir()); !unsafe.empty()) {
    std::fprintf(stderr, "cusnap run: %s; the job was not started\n", unsafe.c_str());
    return kExitUsage;
  }
  if (::access(shim.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "cusnap run: the shim %s is missing: %s\n", shim.c_str(),
                 std::strerror(errno));
    return kExitError;
  }
  const char* env = std::getenv("CUSNAP_DRIVER");
  auto choice = coord::ParseDriverChoice(env ? env : "");
  if (!choice) {
    std::fprintf(stderr, "cusnap run: %s\n", choice.error().message.c_str());
    return kExitUsage;
  }
  auto simulated = coord::WouldUseSimulated(*choice, bin);
  if (!simulated) {
    std::fprintf(stderr, "cusnap run: %s\n", simulated.error().message.c_str());
    return kExitError;
  }
  // LD_PRELOAD entries may be separated by spaces or colons; colon keeps paths with spaces.
  Prepend("LD_PRELOAD", shim, ':');
  if (*simulated) Prepend("LD_LIBRARY_PATH", coord::SimulatedDriverDir(bin), ':');
  // What `cusnap dump` (CRIU) needs from the job, unless the user chose otherwise: PyTorch's
  // TCPStore on its libuv backend holds an io_uring instance, which CRIU cannot dump
  // ("anon_inode:[io_uring]", DRIVER-FACTS "Machine notes"); USE_LIBUV=0 selects the classic
  // backend (UV_USE_IO_URING=0 and TORCH_TCPSTORE_USE_LIBUV=0 do not remove it).
  ::setenv("USE_LIBUV", "0", /*overwrite=*/0);
  // One log file for the whole job: each process's shim would open a relative path from its
  // own working directory, which the job's processes change.
  if (const char* log_file = std::getenv("CUSNAP_LOG_FILE"); log_file && *log_file && *log_file != '/') {
    ::setenv("CUSNAP_LOG_FILE", std::filesystem::absolute(log_file).c_str(), 1);
  }

  // A session whose leader is outside this PID namespace (`docker exec`, a container
  // runtime, a CI runner) makes the job one CRIU refuses to dump (OwnSessionId,
  // images/criu_preconditions.h): the job gets a session of its own. setsid fails for a process-group leader (a shell with job
  // control made us one); then `cusnap dump` refuses, naming the fix.
  if (::getsid(0) == 0 && ::setsid() < 0) {
    std::fprintf(stderr, "cusnap run: note: the job's session leader is outside its PID "
                         "namespace and setsid failed (%s): `cusnap dump` will refuse this job; "
                         "start it with `setsid cusnap run -- ...`\n", std::strerror(errno));
  }

  if (pid_namespace) return RunInOwnPidNamespace(command);
  ReopenForeignFilesHere();
  return Exec(command);
}

}  // namespace cusnap::cli
