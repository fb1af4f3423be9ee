// gpu_pair_launcher: starts roles "a" and "b" of a GPU test program as two children joined
// by a SOCK_SEQPACKET socket pair, waits for both, and exits 0 only when both did. It links
// no CUDA and never touches a GPU: it is the parent of the job, the process whose tree
// `cusnap checkpoint --pid` walks.
//
//   gpu_pair_launcher [--stdin-to a|none] [--via-cusnap <cusnap>] [--ranks N] -- <program> [args...]
//
// Each child runs `<program> --role <a|b> --peer-fd <n> [args...]`, or with --via-cusnap
// `<cusnap> run -- <program> ...` (the workers get the shim, the launcher does not: a
// supervisor that is no CUDA process and has no endpoint). With --stdin-to a (the default)
// role a inherits the launcher's standard input (a harness drives the job through it); role
// b reads /dev/null.
//
// With --ranks N (N >= 2) it starts N children instead, every two joined by a socket pair of
// their own (a full mesh): child r runs `<program> --rank r --ranks N --peer-fds f0,...,f(N-1)
// [args...]`, where f_p is its end of the pair with rank p and f_r is -1. Rank 0 takes the
// place of role a (its standard input with --stdin-to a).
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int kMaxRanks = 64;  // a full mesh: ranks * (ranks - 1) descriptors in the launcher

[[noreturn]] void Die(const char* what) {
  std::printf("[launcher %d] FAIL: %s: %s\n", static_cast<int>(getpid()), what, std::strerror(errno));
  std::fflush(stdout);
  std::_Exit(1);
}

// Forks and execs one child with `role_args` after the program's name; only `keep_fds` (its
// ends of the socket pairs) survive the exec, every other descriptor is CLOEXEC.
pid_t StartChild(const std::vector<std::string>& role_args, const std::vector<int>& keep_fds,
                 bool keep_stdin, const std::vector<char*>& command, const char* via_cusnap) {
  const pid_t pid = fork();
  if (pid < 0) Die("fork");
  if (pid > 0) return pid;
  for (const int fd : keep_fds) {
    if (fcntl(fd, F_SETFD, 0) != 0) Die("fcntl");
  }
  if (!keep_stdin) {
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0) Die("redirecting stdin");
  }
  std::vector<char*> argv;
  if (via_cusnap != nullptr) {
    argv.push_back(const_cast<char*>(via_cusnap));
    argv.push_back(const_cast<char*>("run"));
    argv.push_back(const_cast<char*>("--"));
  }
  argv.push_back(command[0]);
  for (const std::string& arg : role_args) argv.push_back(const_cast<char*>(arg.c_str()));
  for (size_t i = 1; i < command.size(); ++i) argv.push_back(command[i]);
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  Die("execv");
}

pid_t StartRole(const char* role, int peer_fd, bool keep_stdin, const std::vector<char*>& command,
                const char* via_cusnap) {
  return StartChild({"--role", role, "--peer-fd", std::to_string(peer_fd)}, {peer_fd}, keep_stdin,
                    command, via_cusnap);
}

// Waits for every child in `labels` (pid -> what to call it); true when all exited 0.
bool WaitAll(const std::map<pid_t, std::string>& labels) {
  bool ok = true;
  for (size_t left = labels.size(); left > 0;) {
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      Die("waitpid");
    }
    const auto found = labels.find(done);
    if (found == labels.end()) continue;
    --left;
    const char* role = found->second.c_str();
    if (WIFEXITED(status)) {
      std::printf("[launcher %d] %s (pid %d) exited with status %d\n", static_cast<int>(getpid()),
                  role, static_cast<int>(done), WEXITSTATUS(status));
      ok = ok && WEXITSTATUS(status) == 0;
    } else {
      std::printf("[launcher %d] %s (pid %d) killed by signal %d\n", static_cast<int>(getpid()),
                  role, static_cast<int>(done), WIFSIGNALED(status) ? WTERMSIG(status) : -1);
      ok = false;
    }
    std::fflush(stdout);
  }
  return ok;
}

// --ranks N: a socket pair for every two ranks, then one child per rank.
bool RunRanks(int ranks, bool stdin_to_first, const std::vector<char*>& command, const char* via_cusnap) {
  const size_t n = static_cast<size_t>(ranks);
  std::vector<std::vector<int>> ends(n, std::vector<int>(n, -1));  // ends[r][p]: r's end towards p
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = r + 1; p < n; ++p) {
      int pair[2];
      if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) Die("socketpair");
      ends[r][p] = pair[0];
      ends[p][r] = pair[1];
    }
  }
  std::printf("[launcher %d] starting %d ranks of %s\n", static_cast<int>(getpid()), ranks, command[0]);
  std::map<pid_t, std::string> labels;
  for (size_t r = 0; r < n; ++r) {
    std::string list;
    std::vector<int> keep;
    for (size_t p = 0; p < n; ++p) {
      if (p > 0) list += ',';
      list += std::to_string(ends[r][p]);
      if (p != r) keep.push_back(ends[r][p]);
    }
    const pid_t pid = StartChild({"--rank", std::to_string(r), "--ranks", std::to_string(n), "--peer-fds", list},
                                 keep, stdin_to_first && r == 0, command, via_cusnap);
    labels[pid] = "rank " + std::to_string(r);
    std::printf("[launcher %d] rank %zu is pid %d\n", static_cast<int>(getpid()), r, static_cast<int>(pid));
  }
  for (const auto& row : ends) {
    for (const int fd : row) {
      if (fd >= 0) close(fd);
    }
  }
  std::fflush(stdout);
  return WaitAll(labels);
}

}  // namespace

int main(int argc, char** argv) {
  std::string stdin_to = "a";
  const char* via_cusnap = nullptr;
  int ranks = 0;  // 0: the two roles a and b
  int i = 1;
  for (; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) { ++i; break; }
    if (std::strcmp(argv[i], "--stdin-to") == 0 && i + 1 < argc) { stdin_to = argv[++i]; continue; }
    if (std::strcmp(argv[i], "--via-cusnap") == 0 && i + 1 < argc) { via_cusnap = argv[++i]; continue; }
    if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      ranks = *end == '\0' && value >= 2 && value <= kMaxRanks ? static_cast<int>(value) : -1;
      continue;
    }
    std::fprintf(stderr,
                 "usage: gpu_pair_launcher [--stdin-to a|none] [--via-cusnap <cusnap>] [--ranks N] -- <program> [args...]\n");
    return 2;
  }
  if (ranks < 0) {
    std::fprintf(stderr, "gpu_pair_launcher: --ranks must be between 2 and %d\n", kMaxRanks);
    return 2;
  }
  if (i >= argc) {
    std::fprintf(stderr, "gpu_pair_launcher: no program given after --\n");
    return 2;
  }
  std::vector<char*> command(argv + i, argv + argc);
  if (ranks != 0) return RunRanks(ranks, stdin_to == "a", command, via_cusnap) ? 0 : 1;

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

  const bool ok = WaitAll({{a, "role a"}, {b, "role b"}});
  return ok ? 0 : 1;
}
