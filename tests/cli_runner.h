// What the tests that drive the real `cusnap` program share: a scratch directory with its own
// control directory and simulated machine, running `cusnap` and capturing its exit status,
// stdout and stderr, starting children with chosen descriptors, and talking to a child over a
// line protocol on pipes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "scratch_dir.h"

extern char** environ;

namespace cusnap::testing {

/// The state letter of `pid` (/proc/<pid>/stat field 3: 'T' stopped, 't' traced, 'Z'...), '?'
/// when unreadable.
inline char ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

/// $name, or "" when unset.
inline std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

/// Points everything this test process starts at a control directory and a simulated machine
/// of its own (<dir>/control, <dir>/sim), so `--all` and cuMemGetInfo see only this test's
/// job, on the simulated driver; the test process itself preloads nothing (its children get
/// the shim from `cusnap run`).
inline void UseOwnMachine(const std::string& dir) {
  ::mkdir((dir + "/control").c_str(), 0700);  // a control directory must be private
  std::filesystem::create_directory(dir + "/sim");
  ::setenv("CUSNAP_CONTROL_DIR", (dir + "/control").c_str(), 1);
  ::setenv("SIMCUDA_DIR", (dir + "/sim").c_str(), 1);
  ::setenv("CUSNAP_DRIVER", "sim", 1);
  ::unsetenv("LD_PRELOAD");
}

/// One of our descriptors handed to a child: `fd` becomes the child's descriptor `as`.
struct ChildFd {
  int fd;
  int as;
};

/// posix_spawn of `args` (args[0] is a path) with `fds` placed in the child; our other
/// descriptors stay out of it (they are close-on-exec). Each source is first copied above
/// every target, so no dup2 of the spawn overwrites a source a later one still reads. Returns
/// the pid, or -1 when the spawn failed.
inline pid_t Spawn(const std::vector<std::string>& args, const std::vector<ChildFd>& fds) {
  int above = 10;
  for (const ChildFd& f : fds) above = std::max(above, f.as + 1);
  std::vector<int> copies;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  bool placed = true;
  for (const ChildFd& f : fds) {
    const int copy = ::fcntl(f.fd, F_DUPFD_CLOEXEC, above);
    if (copy >= 0) copies.push_back(copy);
    placed = placed && copy >= 0 && posix_spawn_file_actions_adddup2(&actions, copy, f.as) == 0;
  }
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      placed ? ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) : EBADF;
  posix_spawn_file_actions_destroy(&actions);
  for (int copy : copies) ::close(copy);
  return rc == 0 ? pid : -1;
}

/// What a finished command gave: exit status (-1 when it did not exit), stdout, stderr.
struct Ran {
  int status = -1;
  std::string out, err;
};

/// Runs shell command `command` with stderr sent to `<scratch_dir>/stderr`, and collects all.
inline Ran RunCommand(const std::string& command, const std::string& scratch_dir) {
  const std::string stderr_path = scratch_dir + "/stderr";
  Ran r;
  FILE* p = ::popen((command + " 2>" + stderr_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = std::fopen(stderr_path.c_str(), "r")) {
    while ((n = std::fread(buf, 1, sizeof buf, e)) > 0) r.err.append(buf, n);
    std::fclose(e);
  }
  return r;
}

/// Runs the built `cusnap` ($CUSNAP_TEST_BIN_DIR/cusnap) with `args`, each single-quoted.
inline Ran RunCusnap(const std::vector<std::string>& args, const std::string& scratch_dir) {
  std::string command = Env("CUSNAP_TEST_BIN_DIR") + "/cusnap";
  for (const auto& a : args) command += " '" + a + "'";
  return RunCommand(command, scratch_dir);
}

/// A test on a machine of its own: SetUp makes the scratch directory dir_
/// (/tmp/cusnap-<name>.XXXXXX) and points everything the test starts at it (UseOwnMachine);
/// TearDown removes it. A derived fixture's SetUp calls this one first, its TearDown last.
class OwnMachineTest : public ScratchDirTest {
 protected:
  explicit OwnMachineTest(std::string name) : ScratchDirTest(std::move(name)) {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (HasFatalFailure()) return;
    UseOwnMachine(dir_);
  }
  /// The built `cusnap` with `args` (RunCusnap), its stderr captured under dir_.
  Ran Cusnap(const std::vector<std::string>& args) { return RunCusnap(args, dir_); }
};

/// A child's command channel: one request line in, one answer line out.
struct LineChannel {
  FILE* in = nullptr;
  FILE* out = nullptr;
  /// The next line without its newline, or "<eof>".
  std::string Line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out) == nullptr) return "<eof>";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  /// Sends `line` and returns the answer.
  std::string Ask(const std::string& line) {
    std::fprintf(in, "%s\n", line.c_str());
    std::fflush(in);
    return Line();
  }
};

/// A child started by StartChild: its pid and its line channel (stdin, stdout).
struct Child : LineChannel {
  pid_t pid = -1;
  /// Says "exit", closes the channel and reaps the child. Returns its wait status (-1 when it
  /// was not running or could not be reaped).
  int Stop() {
    if (in != nullptr) {
      std::fprintf(in, "exit\n");
      std::fflush(in);
      std::fclose(in);
    }
    int status = -1;
    if (pid > 0) {
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (out != nullptr) std::fclose(out);
    in = out = nullptr;
    pid = -1;
    return status;
  }
};

/// Starts `args` with its stdin and stdout on pipes to us (the returned channel) and `extra`
/// descriptors placed as given. pid is -1 when the spawn failed.
inline Child StartChild(const std::vector<std::string>& args, const std::vector<ChildFd>& extra = {}) {
  Child c;
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0) return c;
  if (::pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    return c;
  }
  std::vector<ChildFd> fds = {{to_child[0], 0}, {from_child[1], 1}};
  fds.insert(fds.end(), extra.begin(), extra.end());
  c.pid = Spawn(args, fds);
  ::close(to_child[0]);
  ::close(from_child[1]);
  c.in = ::fdopen(to_child[1], "w");
  c.out = ::fdopen(from_child[0], "r");
  return c;
}

}  // namespace cusnap::testing
