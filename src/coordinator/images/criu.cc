// Finding and running CRIU (criu.h).
#include "coordinator/images/criu.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "coordinator/proc/processes.h"
#include "coordinator/images/criu_preconditions.h"

extern char** environ;

namespace cusnap::coord {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

/// Runs `argv` with stdout and stderr to `out_path` (stdin from /dev/null), in a process group
/// of its own; its exit status, 128+N for signal N, or -errno when it could not start.
int Spawn(const std::vector<std::string>& argv, const std::string& out_path) {
  // A Ctrl-C at the terminal signals the foreground group: cusnap decides what it means (past
  // the point of no return, nothing), while CRIU would abandon a dump half written.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> owned = argv;
  std::vector<char*> args;
  for (auto& a : owned) args.push_back(a.data());
  args.push_back(nullptr);
  // CRIU loads every plugin of its plugin directory, cusnap's own among them: this tells
  // libcusnap_criu.so that cusnap drives this CRIU run (the job is checkpointed already).
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  std::string driven = std::string(kCusnapRunsCriuVariable) + "=1";
  env.push_back(driven.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return -rc;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// CRIU's error lines in its log (without the harmless RLIMIT_NOFILE one that an
/// unprivileged container always gives): the first, with the line before it (CRIU names what
/// it was doing there, the first error is the cause), and the last two; the log's tail when
/// it has none.
std::string ErrorLines(const std::string& log) {
  std::istringstream in(log);
  std::vector<std::string> all;
  std::vector<size_t> errors;
  for (std::string line; std::getline(in, line);) {
    if (line.find("Error") != std::string::npos && line.find("RLIMIT_NOFILE") == std::string::npos) {
      errors.push_back(all.size());
    }
    all.push_back(line);
  }
  std::vector<size_t> pick;
  if (errors.empty()) {
    for (size_t i = all.size() > 4 ? all.size() - 4 : 0; i < all.size(); ++i) pick.push_back(i);
  } else {
    if (errors.front() > 0) pick.push_back(errors.front() - 1);
    pick.push_back(errors.front());
    for (size_t i = errors.size() > 2 ? errors.size() - 2 : 1; i < errors.size(); ++i) {
      if (errors[i] > pick.back()) pick.push_back(errors[i]);
    }
  }
  std::string out;
  for (const size_t i : pick) out += (out.empty() ? "" : " | ") + all[i];
  return out;
}

std::vector<std::string> ExtraOptions() {
  std::vector<std::string> out;
  if (const char* extra = Env("CUSNAP_CRIU_OPTS")) {
    std::istringstream in(extra);
    for (std::string word; in >> word;) out.push_back(word);
  }
  return out;
}

/// True when `name` is an executable in a directory of PATH or in /usr/sbin, /sbin.
bool OnPath(const std::string& name) {
  std::string dirs = Env("PATH") ? Env("PATH") : "";
  dirs += ":/usr/sbin:/sbin";
  std::istringstream in(dirs);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

/// Options dump and restore share: each must see the same ones (CRIU refuses a restore
/// whose images need an option the restore was not given). CRIU locks the network while it
/// dumps and restores established TCP connections with iptables by default; a machine
/// without iptables (our GPU machines) gets the nftables lock (libnftables is linked into
/// CRIU), unless CUSNAP_CRIU_OPTS names a lock itself.
std::vector<std::string> CommonOptions() {
  std::vector<std::string> out = {"--tcp-established", "--ext-unix-sk", "--file-locks",
                                  "--link-remap", "--shell-job"};
  const char* extra = Env("CUSNAP_CRIU_OPTS");
  const bool lock_given = extra != nullptr && std::strstr(extra, "--network-lock") != nullptr;
  if (!lock_given && !OnPath("iptables")) {
    out.push_back("--network-lock");
    out.push_back("nftables");
  }
  return out;
}

}  // namespace

std::string WhyCriuCannotDump(int pid) {
  // Every reason at once, so that one refusal tells the user all there is to change.
  std::vector<std::string> why;
  if (OwnSessionId(pid) == 0) {
    why.push_back("has its session leader outside its PID namespace, and CRIU cannot dump "
                  "such a process; start the job in a session of its own (`cusnap run` does "
                  "when its own session leader is outside, or `setsid cusnap run -- ...`)");
  }
  if (HoldsIoUring(pid)) {
    why.push_back("holds an io_uring instance, which CRIU cannot dump (torchrun's agent, "
                  "pt_elastic, holds one in torch 2.11 whatever its rendezvous; start the ranks "
                  "without it, one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and "
                  "MASTER_PORT set, under `cusnap run`, which sets USE_LIBUV=0: docs/DUMP.md)");
  }
  if (!SameNamespace("mnt", pid, ::getpid())) {
    why.push_back("runs in a mount namespace other than this cusnap's: CRIU would dump its "
                  "mounts too and cannot restore them (\"mnt: BUG\"), so the job could never "
                  "come back; start it with `cusnap run --pid-namespace` (a namespace cusnap "
                  "joins itself), or run cusnap in the job's mount namespace");
  } else if (const auto foreign = FilesOnForeignMounts("/proc/" + std::to_string(pid)); !foreign.empty()) {
    std::string fds, others;
    size_t fd_count = 0;
    for (const auto& f : foreign) {
      std::string& list = f.fd >= 0 ? fds : others;
      list += (list.empty() ? "" : ", ") + (f.fd >= 0 ? std::to_string(f.fd) : f.what) + " (" + f.path + ")";
      fd_count += f.fd >= 0 ? 1 : 0;
    }
    const bool one = fd_count == 1;
    if (!fds.empty()) {
      why.push_back(std::string(one ? "holds descriptor " : "holds descriptors ") + fds +
                    (one ? ", a file" : ", files") + " opened in another mount namespace, which "
                    "CRIU cannot dump (\"Can't lookup mount\"); start the job with `cusnap run`, "
                    "which opens such inherited files again in the job's own namespace, or have "
                    "the job close " + (one ? "it" : "them"));
    }
    if (!others.empty()) {
      // A job started through `nsenter --wd` runs a program of the outer namespace, and CRIU
      // would fail on it after the checkpoint.
      why.push_back("holds " + others + " on a mount of another mount namespace, which CRIU "
                    "cannot dump (\"Can't lookup mount\"); start the job from within the mount "
                    "namespace it runs in, not through a working directory, program or library "
                    "of another one (`nsenter --wd` keeps the outer namespace's directory)");
    }
  }
  std::string text;
  for (const auto& w : why) text += (text.empty() ? "" : "; and it ") + w;
  return text;
}

Result<std::string> FindCriu() {
  if (const char* given = Env("CUSNAP_CRIU")) {
    if (::access(given, X_OK) != 0) {
      return Error{errno, std::string("CUSNAP_CRIU=") + given + " is not an executable program"};
    }
    return std::string(given);
  }
  if (const char* path = Env("PATH")) {
    std::istringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/criu";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return Error{ENOENT, "criu not found (set CUSNAP_CRIU or put criu on PATH; "
                       "scripts/fetch_criu.sh builds one that works on this kernel)"};
}

Result<std::string> CriuVersion(const std::string& criu) {
  char templ[] = "/tmp/cusnap-criu-version.XXXXXX";
  const int fd = ::mkstemp(templ);
  if (fd < 0) return Error{errno, std::string("cannot create a temporary file: ") + std::strerror(errno)};
  ::close(fd);
  const int rc = Spawn({criu, "--version"}, templ);
  const std::string text = ReadText(templ);
  ::unlink(templ);
  if (rc != 0) {
    return Error{rc, criu + " --version failed (exit " + std::to_string(rc) + "): " + ErrorLines(text)};
  }
  return text.substr(0, text.find('\n'));
}

std::string CriuVersionNumber(const std::string& version_line) {
  static constexpr std::string_view kPrefix = "Version: ";
  if (version_line.starts_with(kPrefix)) return version_line.substr(kPrefix.size());
  return version_line;
}

std::vector<std::string> CriuDumpArgs(int root_pid, const std::string& dir, bool leave_running) {
  std::vector<std::string> args = {"dump", "-t", std::to_string(root_pid), "-D", dir};
  for (auto& o : CommonOptions()) args.push_back(o);
  if (leave_running) args.push_back("--leave-running");
  for (auto& o : ExtraOptions()) args.push_back(o);
  return args;
}

std::vector<std::string> CriuRestoreArgs(const std::string& dir) {
  std::vector<std::string> args = {"restore", "-D", dir, "-d", "--pidfile", dir + "/restored.pid",
                                   "--leave-stopped"};
  for (auto& o : CommonOptions()) args.push_back(o);
  for (auto& o : ExtraOptions()) args.push_back(o);
  return args;
}

Status RunCriu(const std::string& criu, const std::vector<std::string>& args,
               const std::string& dir, const std::string& log_name) {
  std::vector<std::string> argv = {criu};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("-o");
  argv.push_back(log_name);  // relative to -D: CRIU's log lands in the images directory
  argv.push_back("-v4");
  const int rc = Spawn(argv, dir + "/" + kCriuOutputLogName);
  if (rc == 0) return Ok{};
  // CRIU writes its log once it has parsed its options; before, only its output tells.
  const bool logged = ::access((dir + "/" + log_name).c_str(), F_OK) == 0;
  const std::string log = dir + "/" + (logged ? log_name : kCriuOutputLogName);
  std::string why = ErrorLines(ReadText(log));
  if (why.empty() && logged) why = ErrorLines(ReadText(dir + "/" + kCriuOutputLogName));
  // A disk that filled up may stop CRIU before its first log line: an empty excerpt says
  // nothing, so the message says that there is none.
  if (why.empty()) why = "its log is empty (CRIU wrote no reason)";
  if (args[0] == "restore") {
    if (const int taken = CriuRestorePidTaken(dir); taken > 0) {
      why += "; pid " + std::to_string(taken) + " of the dump was taken by another process after "
             "cusnap found it free: run the restore again (the job then comes back in a PID "
             "namespace of its own)";
    } else if (why.find("has bad size") != std::string::npos) {
      // CRIU restores a file the job had open only as long as it is as the dump found it.
      why += "; a file the job had open changed size since the dump (its output file, when "
             "the job wrote on after a --leave-running dump or another restore of these "
             "images): put it back as it was, or dump the job again";
    }
  }
  return Error{rc, "criu " + args[0] + " failed (exit " + std::to_string(rc) + ", log " + log +
                       "): " + why};
}

int CriuRestorePidTaken(const std::string& dir) {
  static constexpr std::string_view kFork = "Can't fork for ";
  std::istringstream in(ReadText(dir + "/" + kCriuRestoreLogName));
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(kFork);
    if (at == std::string::npos || line.find("File exists") == std::string::npos) continue;
    const int pid = std::atoi(line.c_str() + at + kFork.size());
    if (pid > 0) return pid;
  }
  return 0;
}

Result<int> RestoredRootPid(const std::string& dir) {
  const std::string text = ReadText(dir + "/restored.pid");
  char* end = nullptr;
  const long pid = std::strtol(text.c_str(), &end, 10);
  if (pid <= 0 || end == text.c_str()) {
    return Error{-1, "criu restore left no root pid in " + dir + "/restored.pid"};
  }
  return static_cast<int>(pid);
}

}  // namespace cusnap::coord
