// gpu_pair_launcher: starts roles "a" and "b" of a GPU test program as two children joined
// by a SOCK_SEQPACKET socket pair, waits for both, and exits 0 only when both did. It links
// no CUDA and never touches a GPU: it is the parent of the job, the process whose tree
// `cusnap checkpoint --pid` walks.
//
//   gpu_pair_launcher [--stdin-to a|none] [--via-cusnap <cusnap>] -- <program> [args...]
//
// Each child runs `<program> --role <a|b> --peer-fd <n> [args...]`, or with --via-cusnap
// `<cusnap> run -- <program> ...` (the workers get the shim, the launcher does not: a
// supervisor that is no CUDA process and has no endpoint). With --stdin-to a (the default)
// role a inherits the launcher's standard input (a harness drives the job through it); role
// b reads /dev/null.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

[[noreturn]] void Die(const char* what) {
  std::printf("[launcher %d] FAIL: %s: %s\n", static_cast<int>(getpid()), what, std::strerror(errno));
  std::fflush(stdout);
  std::_Exit(1);
}

pid_t StartRole(const char* role, int peer_fd, bool keep_stdin, const std::vector<char*>& command,
                const char* via_cusnap) {
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid > 0) return pid;
  // Child: keep only its end of the pair across exec.
  if (fcntl(peer_fd, F_SETFD, 0) != 0) Die("fcntl");
  if (!keep_stdin) {
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0) Die("redirecting stdin");
  }
  const std::string fd_text = std::to_string(peer_fd);
  std::vector<char*> argv;
  if (via_cusnap != nullptr) {
    argv.push_back(const_cast<char*>(via_cusnap));
    argv.push_back(const_cast<char*>("run"));
    argv.push_back(const_cast<char*>("--"));
  }
  argv.push_back(command[0]);
  argv.push_back(const_cast<char*>("--role"));
  argv.push_back(const_cast<char*>(role));
  argv.push_back(const_cast<char*>("--peer-fd"));
  argv.push_back(const_cast<char*>(fd_text.c_str()));
  for (size_t i = 1; i < command.size(); ++i) argv.push_back(command[i]);
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  Die("execv");
}

}  // namespace

int main(int argc, char** argv) {
  std::string stdin_to = "a";
  const char* via_cusnap = nullptr;
  int i = 1;
  for (; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) { ++i; break; }
    if (std::strcmp(argv[i], "--stdin-to") == 0 && i + 1 < argc) { stdin_to = argv[++i]; continue; }
    if (std::strcmp(argv[i], "--via-cusnap") == 0 && i + 1 < argc) { via_cusnap = argv[++i]; continue; }
    std::fprintf(stderr,
                 "usage: gpu_pair_launcher [--stdin-to a|none] [--via-cusnap <cusnap>] -- <program> [args...]\n");
    return 2;
  }
  if (i >= argc) {
    std::fprintf(stderr, "gpu_pair_launcher: no program given after --\n");
    return 2;
  }
  std::vector<char*> command(argv + i, argv + argc);

  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) Die("socketpair");
  std::printf("[launcher %d] starting roles a and b of %s\n", static_cast<int>(getpid()), command[0]);
  const pid_t a = StartRole("a", pair[0], stdin_to == "a", command, via_cusnap);
  const pid_t b = StartRole("b", pair[1], false, command, via_cusnap);
  close(pair[0]);
  close(pair[1]);
  std::printf("[launcher %d] role a is pid %d, role b is pid %d\n", static_cast<int>(getpid()),
              static_cast<int>(a), static_cast<int>(b));
  std::fflush(stdout);

  bool ok = true;
  for (int left = 2; left > 0;) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      Die("waitpid");
    }
    if (done != a && done != b) continue;
    --left;
    const char* role = done == a ? "a" : "b";
    if (WIFEXITED(status)) {
      std::printf("[launcher %d] role %s (pid %d) exited with status %d\n", static_cast<int>(getpid()),
                  role, static_cast<int>(done), WEXITSTATUS(status));
      ok = ok && WEXITSTATUS(status) == 0;
    } else {
      std::printf("[launcher %d] role %s (pid %d) killed by signal %d\n", static_cast<int>(getpid()),
                  role, static_cast<int>(done), WIFSIGNALED(status) ? WTERMSIG(status) : -1);
      ok = false;
    }
    std::fflush(stdout);
  }
  return ok ? 0 : 1;
}
