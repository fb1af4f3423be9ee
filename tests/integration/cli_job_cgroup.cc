// Carrier memory on cgroup v1, and a participant lost under a command, through the real
// `cusnap` (simulated driver, job_worker processes through `cusnap run`). The shims read a
// made-up cgroup v1 hierarchy (CUSNAP_TEST_CGROUP_ROOT: its "cgroup" membership file names
// the memory controller's cgroup, whose memory.limit_in_bytes and memory.usage_in_bytes
// leave less than the carrier needs): the checkpoint is refused naming the shortfall, and
// goes through once the limit is raised. A participant killed during save (as the kernel's
// OOM killer does in a cgroup too small) is named as lost, and the refusal never says that
// nothing was changed.
#include <gmock/gmock.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class CliJobCgroup : public JobTest {
 protected:
  void TearDown() override {
    ::unsetenv("CUSNAP_TEST_CGROUP_ROOT");
    ::unsetenv("SIMCUDA_DELAYS");
    JobTest::TearDown();
  }

  /// A cgroup v1 memory hierarchy at <dir_>/cgroup-v1: the workers are in /job/rank, whose
  /// parent /job has `limit` bytes with `usage` used.
  std::string FakeCgroupV1(uint64_t limit, uint64_t usage) {
    const std::string root = dir_ + "/cgroup-v1";
    fs::create_directories(root + "/memory/job/rank");
    std::ofstream(root + "/cgroup") << "12:pids:/job\n5:memory:/job/rank\n0::/\n";
    SetV1Limit(limit, usage);
    std::ofstream(root + "/memory/job/rank/memory.limit_in_bytes") << "9223372036854771712\n";
    std::ofstream(root + "/memory/job/rank/memory.usage_in_bytes") << usage << "\n";
    return root;
  }

  void SetV1Limit(uint64_t limit, uint64_t usage) {
    const std::string job = dir_ + "/cgroup-v1/memory/job";
    std::ofstream(job + "/memory.limit_in_bytes") << limit << "\n";
    std::ofstream(job + "/memory.usage_in_bytes") << usage << "\n";
  }

  /// A creator of A (2 MiB, device 0) shares it with an importer (device 1) that maps it
  /// and creates B (2 MiB) of its own.
  void StartJob() {
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    ASSERT_NO_FATAL_FAILURE(CreateFilled(*creator_, "A", 2, "dev", 0, "a", "0"));
    ASSERT_NO_FATAL_FAILURE(ShareMapped(*creator_, "A", *importer_, "ai", 2, "1"));
    ASSERT_NO_FATAL_FAILURE(CreateFilled(*importer_, "B", 2, "dev", 1, "b", "1"));
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
};

// 1 MiB left in the v1 parent cgroup, 2 MiB of carrier per creator: refused, naming both
// figures; nothing changes. With the limit raised the checkpoint and restore go through.
TEST_F(CliJobCgroup, CarrierPastTheV1MemoryLimitIsRefusedAndTakenOnceRaised) {
  ::setenv("CUSNAP_TEST_CGROUP_ROOT", FakeCgroupV1(5u << 20, 4u << 20).c_str(), 1);
  ASSERT_NO_FATAL_FAILURE(StartJob());
  ::unsetenv("CUSNAP_TEST_CGROUP_ROOT");
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("host memory (cgroup memory limit): 2097152 bytes needed, "
                                "1048576 available"));
  EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  CheckEveryByte();
  SetV1Limit(64u << 20, 4u << 20);
  Cycle(state);
}

// The creator is killed during save: the refusal names it as lost, its memory with it, and
// does not claim that nothing was changed; the importer runs on with its own bytes.
TEST_F(CliJobCgroup, ParticipantKilledDuringSaveIsNamedAsLost) {
  // Each save copy takes 3 s: the kill lands in save, which follows the quiesce line.
  ::setenv("SIMCUDA_DELAYS", "cuMemcpyDtoHAsync:3000", 1);
  ASSERT_NO_FATAL_FAILURE(StartJob());
  ::unsetenv("SIMCUDA_DELAYS");
  const std::string state = dir_ + "/state";
  const int creator_pid = creator_->pid;
  std::vector<std::string> args = {"checkpoint"};
  args.insert(args.end(), target_.begin(), target_.end());
  args.insert(args.end(), {"--state-dir", state});
  bool killed = false;
  const Ran ck = CusnapWatched(args, [&](pid_t, const Ran& so_far) {
    if (killed || so_far.out.find("\nquiesce ") == std::string::npos) return;
    killed = true;
    Kill(*creator_);
  });
  ASSERT_TRUE(killed) << ck.out << ck.err;
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  const std::string pid = "pid " + std::to_string(creator_pid);
  EXPECT_THAT(ck.err, HasSubstr(pid + " exited during the command"));
  EXPECT_THAT(ck.err, HasSubstr("refused; the job lost " + pid));
  EXPECT_THAT(ck.err, HasSubstr("nothing else was changed"));
  EXPECT_THAT(ck.err, Not(HasSubstr("refused; nothing was changed")));
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  EXPECT_EQ(Ask(*importer_, "check b " + std::to_string(seeds_.at("B"))), "ok");
}

}  // namespace
}  // namespace jobtest
