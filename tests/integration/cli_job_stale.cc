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
    JobTest::TearDown();
  }


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

}  // namespace
}  // namespace jobtest
