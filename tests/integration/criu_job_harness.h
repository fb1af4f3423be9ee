// criu_job (criu_job.cc) as the tests that take it through CRIU start and check it: `cusnap
// dump` / `restore --images-dir` (cli_images_test.cc) and a plain `criu dump` / `criu
// restore` with the CRIU plugin (criu_plugin_test.cc).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "cli_runner.h"
#include "criu_problem.h"

namespace cusnap::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// How often `word` occurs in `text`.
inline size_t CountText(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

/// How often `word` occurs in the file at `path`.
inline size_t CountIn(const std::string& path, const std::string& word) {
  return CountText(ReadAll(path), word);
}

/// Waits until `word` occurs `count` times in the file at `path`, at most 30 s; true when it
/// does.
inline bool AwaitInLog(const std::string& path, const std::string& word, size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (CountIn(path, word) < count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return CountIn(path, word) >= count;
}

/// Starts a process that holds pid `pid` (clone3 with set_tid: root only), or -1 (errno).
inline pid_t HoldPid(pid_t pid) {
  struct {  // struct clone_args, CLONE_ARGS_SIZE_VER1 (Linux 5.5)
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size;
  } args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(&pid);
  args.set_tid_size = 1;
  const long child = ::syscall(SYS_clone3, &args, sizeof args);
  if (child == 0) {
    for (;;) ::pause();  // only async-signal-safe calls in this child of a threaded process
  }
  return static_cast<pid_t>(child);
}

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// Skips a test that takes jobs through CRIU where it cannot: under AddressSanitizer (CRIU
/// would have to dump the shadow mappings of every job process; these run on the release
/// build, scripts/test.sh), and where CRIU does not run (CriuProblem names why).
#define SKIP_UNLESS_CRIU_ROUND_TRIPS()                                                       \
  do {                                                                                      \
    if (kSanitized) GTEST_SKIP() << "runs on the release build (scripts/test.sh), not under " \
                                    "AddressSanitizer";                                     \
    if (const std::string why = CriuProblem(); !why.empty()) {                              \
      GTEST_SKIP() << "CRIU cannot run here: " << why;                                      \
    }                                                                                       \
  } while (0)

/// criu_job under `cusnap run` (a root and its child, 4 MiB each; `rounds` rounds of
/// checks, criu_job.cc), its output in `log`;
/// returns the root's pid once both said READY (-1 after a failed assertion). This process
/// becomes a subreaper: the child is orphaned when CRIU kills the root, its pid must be
/// free for the restore, and whoever adopts it may not reap (ctest as PID 1 of the
/// namespace CI runs in): we do.
inline pid_t StartCriuJob(const std::string& job_dir, const std::string& log, int rounds = 1) {
  ::mkdir(job_dir.c_str(), 0700);
  KeepInheritedDescriptorsFromChildren();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(out, 0);
  std::vector<std::string> command = {Env("CUSNAP_TEST_BIN_DIR") + "/cusnap", "run", "--",
                                      Env("CUSNAP_TEST_BIN_DIR") + "/criu_job", job_dir, "4"};
  if (rounds > 1) command.push_back(std::to_string(rounds));
  const pid_t job = Spawn(command, {{in, 0}, {out, 1}, {out, 2}});
  ::close(out);
  ::close(in);
  EXPECT_GT(job, 0);
  AwaitInLog(log, "READY", 2);
  EXPECT_EQ(CountIn(log, "READY"), 2u) << ReadAll(log);
  return CountIn(log, "READY") == 2 ? job : -1;
}

/// Runs `status` (a `cusnap status` of the job) until it says both participants are active
/// (a job the plugin's watch restores in place once CRIU ended), within 30 s.
inline void AwaitBothActive(const std::function<Ran()>& status) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Ran said;
  while (std::chrono::steady_clock::now() < deadline) {
    said = status();
    if (said.status == 0 && CountText(said.out, " active ") == 2) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL() << "the job did not come back to active: " << said.out << said.err;
}

/// Tells criu_job's processes to go on (<job_dir>/go): each checks its bytes, says PASS or
/// FAIL in `log`; both must pass within 30 s. Then reaps what ended (the namespace's init,
/// restored processes adopted by this subreaper). `child_bytes`: what the child checks (8 MiB;
/// 12 MiB with CRIU_JOB_UNTRACKED's import).
inline void ExpectEveryByteOnceTold(const std::string& job_dir, const std::string& log,
                                    const std::string& child_bytes = "8388608") {
  WriteAll(job_dir + "/go", "");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (CountIn(log, "PASS") + CountIn(log, "FAIL") < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string text = ReadAll(log);
  EXPECT_THAT(text, ::testing::HasSubstr("PASS root 4194304"));
  EXPECT_THAT(text, ::testing::HasSubstr("PASS child " + child_bytes));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("FAIL")));
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace cusnap::testing
