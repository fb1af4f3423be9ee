// Endpoint sockets of ended processes whose pid another process now holds, through the real
// `cusnap`: a socket file named after a live process that is not a cusnap process (a sleep
// this test starts) with nothing listening on it, made after that process started (so its
// age says nothing). `status --prune` removes it, and `checkpoint --all` then checkpoints
// the job (it refused with it there).
#include <gmock/gmock.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/control_dir.h"
#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CliJobStale : public JobTest {
 protected:
  void TearDown() override {
    if (sleeper_ > 0) {
      ::kill(sleeper_, SIGKILL);
      ::waitpid(sleeper_, nullptr, 0);
    }
    for (const pid_t holder : holders_) ::kill(holder, SIGKILL);  // reaped by init
    JobTest::TearDown();
  }

  /// A socket listening at `path` whose listener (the process that called listen(), what
  /// SO_PEERCRED names) has exited and been reaped, while a process it forked keeps the
  /// descriptor open: connecting succeeds, and nothing will ever answer.
  void ListenFromAnExitedProcess(const std::string& path) {
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const pid_t listener = ::fork();
    ASSERT_GE(listener, 0);
    if (listener == 0) {
      const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
      if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
          ::listen(fd, 4) != 0) {
        ::_exit(1);
      }
      const pid_t holder = ::fork();
      if (holder == 0) {
        for (;;) ::pause();
      }
      const ssize_t written = ::write(pipe_fds[1], &holder, sizeof holder);
      ::_exit(written == sizeof holder ? 0 : 1);
    }
    ::close(pipe_fds[1]);
    pid_t holder = -1;
    const ssize_t got = ::read(pipe_fds[0], &holder, sizeof holder);
    ::close(pipe_fds[0]);
    int status = -1;
    ASSERT_EQ(::waitpid(listener, &status, 0), listener);
    ASSERT_EQ(status, 0) << "cannot listen at " << path;
    ASSERT_EQ(got, static_cast<ssize_t>(sizeof holder));
    holders_.push_back(holder);
  }

  std::vector<pid_t> holders_;

  pid_t sleeper_ = -1;
};

TEST_F(CliJobStale, PruneRemovesTheSocketOfAReusedPidAndCheckpointAllThenWorks) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 2, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "A", importer, "ai", 2, "1"));
  sleeper_ = cusnap::testing::Spawn({"/bin/sleep", "1000"}, {});
  ASSERT_GT(sleeper_, 0);
  const std::string stale = std::string(::getenv("CUSNAP_CONTROL_DIR")) + "/" +
                            std::to_string(sleeper_) + ".sock";
  ASSERT_NO_FATAL_FAILURE(BindDeadSocket(stale));
  target_ = {"--all"};
  const std::string state = dir_ + "/state";

  const Ran refused = Checkpoint(state);
  EXPECT_EQ(refused.status, kExitRefused) << refused.out << refused.err;
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));

  const Ran pruned = Cusnap({"status", "--all", "--prune"});
  EXPECT_EQ(pruned.status, 0) << pruned.out << pruned.err;
  EXPECT_THAT(pruned.out + pruned.err, HasSubstr(stale));
  EXPECT_FALSE(fs::exists(stale)) << pruned.out << pruned.err;
  // The job's own endpoints stay.
  const std::string control = ::getenv("CUSNAP_CONTROL_DIR");
  EXPECT_TRUE(fs::exists(control + "/" + std::to_string(creator.pid) + ".sock"));
  EXPECT_TRUE(fs::exists(control + "/" + std::to_string(importer.pid) + ".sock"));

  Cycle(state);
}

// A listener that exited leaves its socket stale even while another process holds it open
// (a killed job's threads close their descriptors after its leader shows as exited, a child
// may inherit it): in the main control directory, named after a live process cusnap did not
// start, and in the control directory of a job in a PID namespace of its own.
TEST_F(CliJobStale, PruneRemovesSocketsWhoseListenerExitedWhileAnotherProcessHoldsThem) {
  Worker& worker = Start("worker", 0);
  sleeper_ = cusnap::testing::Spawn({"/bin/sleep", "1000"}, {});
  ASSERT_GT(sleeper_, 0);
  const std::string control = ::getenv("CUSNAP_CONTROL_DIR");
  const std::string reused = control + "/" + std::to_string(sleeper_) + ".sock";
  const std::string job_dir = control + "/" + cusnap::kJobControlDirPrefix + "Ab12Cd";
  ASSERT_EQ(::mkdir(job_dir.c_str(), 0700), 0);
  const std::string namespaced = job_dir + "/1.sock";
  ASSERT_NO_FATAL_FAILURE(ListenFromAnExitedProcess(reused));
  ASSERT_NO_FATAL_FAILURE(ListenFromAnExitedProcess(namespaced));

  const Ran pruned = Cusnap({"status", "--all", "--prune"});
  EXPECT_EQ(pruned.status, 0) << pruned.out << pruned.err;
  EXPECT_THAT(pruned.out + pruned.err, HasSubstr(reused));
  EXPECT_THAT(pruned.out + pruned.err, HasSubstr(namespaced));
  EXPECT_FALSE(fs::exists(reused)) << pruned.out << pruned.err;
  EXPECT_FALSE(fs::exists(namespaced)) << pruned.out << pruned.err;
  EXPECT_TRUE(fs::exists(control + "/" + std::to_string(worker.pid) + ".sock"));
}

}  // namespace
}  // namespace jobtest
