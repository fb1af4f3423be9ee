// PID namespaces for a job (pid_namespace.h).
#include "cli/pid_namespace.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "cli/cli_common.h"
#include "cli/exit_codes.h"
#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"

namespace cusnap::cli {
namespace {

volatile sig_atomic_t g_forward_to = 0;  // the child SIGINT and SIGTERM are passed on to

void Forward(int signo) {
  if (g_forward_to > 0) ::kill(g_forward_to, signo);
}

/// Passes SIGINT and SIGTERM on to `child` from now on.
void ForwardSignalsTo(pid_t child) {
  g_forward_to = child;
  struct sigaction forward {};
  forward.sa_handler = &Forward;
  forward.sa_flags = SA_RESTART;
  sigemptyset(&forward.sa_mask);
  ::sigaction(SIGINT, &forward, nullptr);
  ::sigaction(SIGTERM, &forward, nullptr);
}


/// The parent of `pid` (/proc/<pid>/status PPid, in this process's numbering); 0 when
/// unreadable.
int ParentOf(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PPid:", 0) == 0) return std::atoi(line.c_str() + 5);
  }
  return 0;
}

/// Whether this init (pid 1) is the only process of its PID namespace (its /proc lists no
/// other pid).
bool OnlyProcessLeft() {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return true;
  bool alone = true;
  while (const dirent* entry = ::readdir(proc)) {
    const char* name = entry->d_name;
    if (name[0] >= '1' && name[0] <= '9' && std::strcmp(name, "1") != 0 &&
        std::strspn(name, "0123456789") == std::strlen(name)) {
      alone = false;
      break;
    }
  }
  ::closedir(proc);
  return alone;
}

/// Makes `first` the next pid this namespace hands out (/proc/sys/kernel/ns_last_pid);
/// best effort.
void NextPidIs(int first) {
  if (first <= 2) return;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/ns_last_pid", "w")) {
    std::fprintf(f, "%d", first - 1);
    std::fclose(f);
  }
}

/// The init of a job's PID namespace: reaps every process of it until none is left.
[[noreturn]] void ServeAsInit(pid_t command, int status_fd) {
  ForwardSignalsTo(command);
  const int rc = ExitStatusOf(command);
  (void)!::write(status_fd, &rc, sizeof rc);
  ::close(status_fd);
  // Nothing of the command's caller is kept open (its pipes must see their end), and the
  // init stays quiet from here on.
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
  if (null > 2) ::close(null);
  ::close_range(3, ~0U, 0);
  g_forward_to = 0;
  // Reaps every orphan. It ends only when the namespace is empty: a `cusnap dump` of the job
  // joined the namespace without being a child of this init, and the kernel would kill it
  // (and its CRIU) with the namespace once the job's last process, its child, is gone.
  for (;;) {
    if (::waitpid(-1, nullptr, 0) >= 0 || errno != ECHILD) continue;
    if (OnlyProcessLeft()) ::_exit(0);
    ::usleep(50'000);
  }
}

/// The init, once inside its namespaces, runs `cusnap` again from `program` (a path, read
/// again in its own mount namespace): what it maps then, its executable and libraries, is on
/// that namespace's mounts. Mapped before the unshare, they stay on the caller's mounts, and
/// a process holding files there is one CRIU cannot dump ("Can't lookup mount"), should the
/// init ever be in a tree it dumps. Serves as the init in this image when the exec fails.
[[noreturn]] void ServeAsInitFromOwnMounts(const std::string& program, pid_t command,
                                           int status_fd) {
  const int flags = ::fcntl(status_fd, F_GETFD);
  if (!program.empty() && flags >= 0 && ::fcntl(status_fd, F_SETFD, flags & ~FD_CLOEXEC) == 0) {
    const std::string pid = std::to_string(command), fd = std::to_string(status_fd);
    const char* argv[] = {program.c_str(), kNamespaceInitCommand, pid.c_str(), fd.c_str(), nullptr};
    ::execv(program.c_str(), const_cast<char* const*>(argv));
    ::fcntl(status_fd, F_SETFD, flags);
  }
  ServeAsInit(command, status_fd);
}

/// Makes this process's later pid messages name the user's pids (common/text.h): `proc_fd`
/// is the /proc of the caller's PID namespace, opened before joining or making the job's.
void NameCallerPids(int proc_fd) {
  if (proc_fd < 0) return;
  coord::KeepCallerProc(proc_fd);
  SetCallerPidLookup(&coord::CallerPidOf);
}

}  // namespace

void ServeAsNamespaceInit(const char* command, const char* status_fd) {
  ServeAsInit(std::atoi(command), std::atoi(status_fd));
}

int RunInNewPidNamespace(const std::function<int()>& command, int first_own_pid, int& init_pid,
                         std::string& why) {
  init_pid = 0;
  int status[2];
  if (::pipe2(status, O_CLOEXEC) != 0) {
    why = std::string("cannot make a pipe: ") + std::strerror(errno);
    return kExitRestoreRefused;
  }
  UniqueFd read_end(status[0]), write_end(status[1]);
  // This program's path, read here: the init runs it again by that path in its namespace.
  std::error_code ec;
  const std::string program = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  // This process stays where it is; its next child is pid 1 of the new namespace.
  if (::unshare(CLONE_NEWPID) != 0) {
    why = std::string("cannot make a PID namespace (unshare: ") + std::strerror(errno) +
          "; it needs CAP_SYS_ADMIN)";
    return kExitRestoreRefused;
  }
  std::fflush(nullptr);
  const pid_t init = ::fork();
  if (init < 0) {
    why = std::string("cannot start the namespace's init: ") + std::strerror(errno);
    return kExitRestoreRefused;
  }
  if (init == 0) {
    read_end.reset();
    // The caller's /proc, kept for the command: what it prints names the caller's pids.
    const int caller_proc = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    // A mount namespace of its own whose /proc shows the new PID namespace: the job and
    // cusnap read processes there by the pids the job knows. Mounts stay private to it.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      std::fprintf(stderr, "cusnap: cannot give the new PID namespace its /proc: %s\n",
                   std::strerror(errno));
      ::_exit(kExitRestoreRefused);
    }
    // The job's session leader is inside its namespace (a later `cusnap dump` needs that).
    ::setsid();
    // cusnap's own processes and threads here (the restore, CRIU) take pids above every pid
    // the job will get back: a job that ran in a namespace before has low ones (its threads
    // too), which CRIU must find free.
    NextPidIs(first_own_pid);
    std::fflush(nullptr);
    const pid_t worker = ::fork();
    if (worker < 0) ::_exit(kExitRestoreRefused);
    if (worker == 0) {
      write_end.reset();
      NameCallerPids(caller_proc);
      const int rc = command();
      std::fflush(nullptr);
      ::_exit(rc);
    }
    if (caller_proc >= 0) ::close(caller_proc);
    ServeAsInitFromOwnMounts(program, worker, write_end.get());
  }
  write_end.reset();
  init_pid = init;
  ForwardSignalsTo(init);
  int rc = kExitError;
  ssize_t n;
  while ((n = ::read(read_end.get(), &rc, sizeof rc)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof rc)) {
    why = "the new PID namespace's init ended before the command did";
    rc = kExitError;
  }
  g_forward_to = 0;
  return rc;
}

int ExitStatusOf(pid_t child) {
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return kExitError;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : kExitError;
}

namespace {

/// Whether `pid` runs this very program (its executable is the same file as this process's).
bool RunsThisProgram(int pid) {
  struct stat theirs {}, ours {};
  return ::stat(("/proc/" + std::to_string(pid) + "/exe").c_str(), &theirs) == 0 &&
         ::stat("/proc/self/exe", &ours) == 0 && theirs.st_dev == ours.st_dev &&
         theirs.st_ino == ours.st_ino;
}

/// When `pid` is the init cusnap made for a job's PID namespace (pid 1 there, this program):
/// the job's root, its first child that is no cusnap of its own (a restore at work); else 0.
int JobUnderOwnInit(int pid) {
  const std::vector<int> pids = coord::NamespacePids(pid);
  if (pids.size() < 2 || pids.back() != 1 || !RunsThisProgram(pid)) return 0;
  for (const int q : coord::ProcessTree(pid)) {
    if (q != pid && ParentOf(q) == pid && !RunsThisProgram(q)) return q;
  }
  return 0;
}

}  // namespace

int HostPidOf(int init_pid, int ns_pid) {
  for (const int pid : coord::ProcessTree(init_pid)) {
    const std::vector<int> pids = coord::NamespacePids(pid);
    if (pids.size() >= 2 && pids.back() == ns_pid) return pid;
  }
  return 0;
}

int JobRootUnder(int pid) {
  if (const int under = JobUnderOwnInit(pid); under > 0) return under;
  const std::vector<int> tree = coord::ProcessTree(pid);
  for (const int p : tree) {
    const std::vector<int> pids = coord::NamespacePids(p);
    if (pids.size() < 2 || pids.back() != 1 || ParentOf(p) != pid) continue;
    for (const int q : coord::ProcessTree(p)) {
      if (q != p && ParentOf(q) == p) return q;
    }
  }
  return pid;
}

void AdoptJobControlDir(int pid) {
  const std::string ours = ControlDir();
  for (const int p : coord::ProcessTree(pid)) {
    const auto dir = coord::ShimControlDir(p);
    if (!dir) continue;
    if (IsJobControlDir(ours, *dir)) ::setenv("CUSNAP_CONTROL_DIR", dir->c_str(), 1);
    return;
  }
}

int InPidNamespaceOf(const char* command_name, int pid, const std::function<int(int)>& command) {
  if (pid <= 0 || coord::SameNamespace("pid", pid, ::getpid())) {
    return command(pid);  // the same namespace (or no such process: the command names it)
  }
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/";
  const std::vector<int> pids = coord::NamespacePids(pid);
  UniqueFd pid_ns(::open((ns + "pid").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd mnt_ns(::open((ns + "mnt").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd own_pid_ns(::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC));
  char cwd[4096];
  const bool have_cwd = ::getcwd(cwd, sizeof cwd) != nullptr;
  UniqueFd cwd_fd(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  KeepChosenDriverMapped();
  if (pids.size() < 2 || !pid_ns.valid() || !mnt_ns.valid() || !own_pid_ns.valid() ||
      !have_cwd || ::setns(pid_ns.get(), CLONE_NEWPID) != 0) {
    std::fprintf(stderr, "cusnap %s: pid %d runs in another PID namespace, which cusnap cannot "
                 "join (%s): run cusnap inside it\n", command_name, pid, std::strerror(errno));
    return kExitError;
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  // This process's later children (a watch that outlives it) start in its own namespace
  // again: one started in the job's would be orphaned to the job's init, inside the tree a
  // checkpoint takes.
  if (child != 0) ::setns(own_pid_ns.get(), CLONE_NEWPID);
  if (child < 0) {
    std::fprintf(stderr, "cusnap %s: fork: %s\n", command_name, std::strerror(errno));
    return kExitError;
  }
  if (child == 0) {
    const int caller_proc = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    // Its /proc shows the job's pids; the working directory is the same path there (relative
    // --state-dir and --images-dir keep their meaning).
    // The same working directory by path when the namespace has it (a job of `cusnap run
    // --pid-namespace`), else this one through its descriptor (a container's root has
    // other folders: relative paths given to the command keep naming this machine's).
    if (::setns(mnt_ns.get(), CLONE_NEWNS) != 0 ||
        (::chdir(cwd) != 0 && ::fchdir(cwd_fd.get()) != 0)) {
      std::fprintf(stderr, "cusnap %s: cannot join the mount namespace of pid %d: %s\n",
                   command_name, pid, std::strerror(errno));
      ::_exit(kExitError);
    }
    // What the command prints names the pids as the caller's namespace numbers them, the
    // job's own beside them.
    NameCallerPids(caller_proc);
    if (pids.back() != pid) {
      std::fprintf(stderr, "cusnap %s: note: pid %d here runs in a PID namespace of its own, "
                   "where it is pid %d: the pids below are this machine's, each with the "
                   "namespace's beside it\n", command_name, pid, pids.back());
    }
    const int rc = command(pids.back());
    std::fflush(nullptr);
    ::_exit(rc);
  }
  ForwardSignalsTo(child);
  const int rc = ExitStatusOf(child);
  g_forward_to = 0;
  return rc;
}

}  // namespace cusnap::cli
