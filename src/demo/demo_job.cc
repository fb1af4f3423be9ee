// Starting, asking and stopping the demo's two workers (demo_job.h).
#include "demo/demo_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/text.h"

extern char** environ;

namespace cusnap::cli::demo {
namespace {

/// The worker program: next to `cusnap` in the build tree (<bin>/cusnap-demo-worker), under
/// <bin>/../libexec/cusnap/ once installed (it is no user program, so not in bin/).
std::string WorkerPath(const std::string& bin) {
  const std::string build_tree = bin + "/" + kWorkerName;
  if (::access(build_tree.c_str(), X_OK) == 0) return build_tree;
  return bin + "/../libexec/cusnap/" + kWorkerName;
}

/// A SOCK_STREAM pair whose descriptors are both above the ones a worker receives (3, 4), so
/// that the spawn's dup2 onto 3 and 4 never meets a descriptor already there.
Status HighSocketPair(int out[2]) {
  int raw[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, raw) != 0) {
    return Error{errno, std::string("socketpair: ") + std::strerror(errno)};
  }
  for (int i = 0; i < 2; ++i) {
    out[i] = ::fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    ::close(raw[i]);
  }
  if (out[0] < 0 || out[1] < 0) {
    const int err = errno;
    if (out[0] >= 0) ::close(out[0]);
    if (out[1] >= 0) ::close(out[1]);
    return Error{err, std::string("fcntl(F_DUPFD_CLOEXEC): ") + std::strerror(err)};
  }
  return Ok{};
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended (status " + std::to_string(status) + ")";
}

}  // namespace

const char* RoleName(Role role) { return role == kCreator ? "creator" : "importer"; }

DemoJob::~DemoJob() { Kill(); }

void DemoJob::Kill() {
  for (Worker& w : workers_) {
    if (w.pid > 0) {
      ::kill(w.pid, SIGKILL);
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.pid = -1;
    }
    if (w.control >= 0) ::close(w.control);
    w.control = -1;
  }
}

Status DemoJob::Start(const std::string& bin, const std::array<int, 2>& devices,
                      const std::array<uint64_t, kAllocations>& sizes) {
  int peer[2];
  if (auto s = HighSocketPair(peer); !s) return s;
  Status result = Ok{};
  for (size_t r = 0; r < 2 && result.ok(); ++r) {
    int control[2];
    if (auto s = HighSocketPair(control); !s) {
      result = s;
      break;
    }
    std::vector<std::string> args = {bin + "/cusnap", "run", "--", WorkerPath(bin),
                                      RoleName(static_cast<Role>(r)), std::to_string(devices[r])};
    for (uint64_t size : sizes) args.push_back(std::to_string(size));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, control[1], kControlFd);
    posix_spawn_file_actions_adddup2(&actions, peer[r], kPeerFd);
    // The worker's own output goes to the demo's stderr: stdout stays the demo's (--json).
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(control[1]);
    if (rc != 0) {
      ::close(control[0]);
      result = Error{rc, std::string("cannot start the ") + RoleName(static_cast<Role>(r)) + " (" +
                             argv[0] + "): " + std::strerror(rc)};
      break;
    }
    workers_[r].pid = pid;
    workers_[r].control = control[0];
  }
  ::close(peer[0]);
  ::close(peer[1]);
  if (!result) Kill();
  return result;
}

Result<std::string> DemoJob::Answer(Role role, const std::string& expect) {
  Worker& w = workers_[role];
  const std::string who = std::string(RoleName(role)) + " (" + ProcessText(w.pid) + ")";
  if (w.pid <= 0) return Error{-1, who + " is not running"};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerTimeoutMs);
  size_t eol;
  while ((eol = w.pending.find('\n')) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{w.control, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      return Error{ETIMEDOUT, who + " did not answer within " +
                                  std::to_string(kAnswerTimeoutMs / 1000) + " s"};
    }
    char buf[512];
    const ssize_t n = ready > 0 ? ::read(w.control, buf, sizeof buf) : -1;
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.pid = -1;
      return Error{-1, who + " " + Describe(status) + " without answering"};
    }
    w.pending.append(buf, static_cast<size_t>(n));
  }
  std::string line = w.pending.substr(0, eol);
  w.pending.erase(0, eol + 1);
  if (line.rfind(expect, 0) != 0) return Error{-1, who + ": " + line};
  return line;
}

Result<std::string> DemoJob::Ask(Role role, const std::string& request, const std::string& expect) {
  Worker& w = workers_[role];
  const std::string text = request + "\n";
  if (w.control < 0 || ::send(w.control, text.data(), text.size(), MSG_NOSIGNAL) !=
                           static_cast<ssize_t>(text.size())) {
    return Error{errno, std::string(RoleName(role)) + " (" + ProcessText(w.pid) +
                            "): cannot send '" + request + "': " + std::strerror(errno)};
  }
  return Answer(role, expect);
}

Status DemoJob::Stop() {
  Status result = Ok{};
  for (Role role : {kImporter, kCreator}) {
    if (auto bye = Ask(role, "exit", "bye"); !bye && result.ok()) result = bye.error();
    Worker& w = workers_[role];
    if (w.pid <= 0) continue;
    // The worker closes its socket by exiting: EOF first, then the exit status.
    char buf[64];
    pollfd p{w.control, POLLIN, 0};
    ssize_t n = 1;
    while (n > 0 && ::poll(&p, 1, kAnswerTimeoutMs) > 0) n = ::read(w.control, buf, sizeof buf);
    if (n != 0) ::kill(w.pid, SIGKILL);  // no EOF in time: it hangs on its way out
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.pid = -1;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && result.ok()) {
      result = Error{-1, std::string(RoleName(role)) + " " + Describe(status)};
    }
  }
  Kill();
  return result;
}

}  // namespace cusnap::cli::demo
