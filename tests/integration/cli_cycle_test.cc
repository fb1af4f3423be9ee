// `cusnap` end to end on the simulated driver: a creator and an importer (the lifecycle
// test's peer program) started with `cusnap run`, then `cusnap checkpoint --pid` on the
// test's own process tree, `status`, `inspect`, `restore` (once plain, once with a device
// map), every byte checked by the peers and a write after restore read by the other side.
// Also: a CUDA process in the tree without an endpoint refuses the checkpoint (exit 3) and
// leaves the job running.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
namespace {

namespace fs = std::filesystem;
using cusnap::testing::Child;
using cusnap::testing::Env;
using cusnap::testing::Ran;
using ::testing::HasSubstr;

class CliCycleTest : public cusnap::testing::OwnMachineTest {
 protected:
  CliCycleTest() : OwnMachineTest("cycle-test") {}
  void TearDown() override {
    for (auto& c : children_) {
      if (c.pid <= 0) continue;
      const int status = c.Stop();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "peer status " << status;
    }
    OwnMachineTest::TearDown();
  }

  /// Starts the peer program in `role` with `ticket_fd` as its descriptor 3, through
  /// `cusnap run` unless `bare`.
  Child& Start(const char* role, int ticket_fd, bool bare = false) {
    const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
    std::vector<std::string> args;
    if (!bare) args = {bin + "/cusnap", "run", "--"};
    args.push_back(bin + "/lifecycle_cycle_peer");
    args.push_back(role);
    children_.push_back(cusnap::testing::StartChild(args, {{ticket_fd, 3}}));
    EXPECT_GT(children_.back().pid, 0);
    return children_.back();
  }

  /// Starts a creator and an importer sharing three allocations; both report "ok".
  /// `creator_faults`: SIMCUDA_FAULTS for the creator only.
  void StartJob(const std::string& creator_faults = "") {
    int tickets[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tickets), 0);
    if (!creator_faults.empty()) ::setenv("SIMCUDA_FAULTS", creator_faults.c_str(), 1);
    Start("creator", tickets[0]);
    ::unsetenv("SIMCUDA_FAULTS");
    Start("importer", tickets[1]);
    ::close(tickets[0]);
    ::close(tickets[1]);
    ASSERT_EQ(children_[0].Line(), "ok");
    ASSERT_EQ(children_[1].Line(), "ok");
  }

  std::vector<Child> children_;
};

TEST_F(CliCycleTest, CheckpointAndRestoreTwoProcessesTwice) {
  StartJob();
  const std::string pid = std::to_string(::getpid());
  const std::string state = dir_ + "/state";

  const Ran before = Cusnap({"status", "--pid", pid, "--json"});
  ASSERT_EQ(before.status, 0) << before.err;
  const auto st = nlohmann::json::parse(before.out);
  ASSERT_EQ(st["participants"].size(), 2u);
  EXPECT_EQ(st["participants"][0]["phase"], "active");

  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    EXPECT_THAT(ck.out, HasSubstr("driver: simulated\n"));
    EXPECT_THAT(ck.out, HasSubstr("2 participants  8.00 MiB"));  // save: the creator's bytes
    EXPECT_THAT(ck.out, HasSubstr("checkpoint: done"));

    const Ran parked = Cusnap({"status", "--all", "--json"});
    const auto parked_doc = nlohmann::json::parse(parked.out);
    ASSERT_EQ(parked_doc["participants"].size(), 2u);
    for (const auto& p : parked_doc["participants"]) {
      EXPECT_EQ(p["phase"], "released");
    }
    const Ran shown = Cusnap({"inspect", state, "--json"});
    ASSERT_EQ(shown.status, 0) << shown.err;
    const auto doc = nlohmann::json::parse(shown.out);
    ASSERT_EQ(doc["participants"].size(), 2u);
    EXPECT_EQ(doc["participants"][0]["saved_bytes"].get<uint64_t>() +
                  doc["participants"][1]["saved_bytes"].get<uint64_t>(),
              8u << 20);

    std::vector<std::string> restore = {"restore", "--pid", pid, "--state-dir", state, "--json"};
    if (cycle == 1) {
      restore.push_back("--device-map");
      restore.push_back("0=1,1=0");
    }
    const Ran rs = Cusnap(restore);
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    const auto report = nlohmann::json::parse(rs.out);
    EXPECT_EQ(report["outcome"], "ok");
    EXPECT_EQ(report["phases"].back()["name"], "activate");
    EXPECT_EQ(children_[0].Ask("check"), "ok");
    EXPECT_EQ(children_[1].Ask("check"), "ok");
  }
  // Sharing still works after the restores: a write on one side is read on the other.
  EXPECT_EQ(children_[1].Ask("write 1 7 4242"), "ok");
  EXPECT_EQ(children_[0].Ask("read 1 7"), "ok 4242");
}

// The creator's first carrier copy fails: SAVE fails, every shim resumes, the command
// exits 3 and the job keeps running with its bytes; the next checkpoint succeeds.
TEST_F(CliCycleTest, FailedSaveResumesTheJob) {
  StartJob("cuMemcpyDtoHAsync:1:999");
  const std::string pid = std::to_string(::getpid());
  const std::string state = dir_ + "/state";
  const Ran failed = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  EXPECT_EQ(failed.status, 3) << failed.out << failed.err;
  EXPECT_THAT(failed.out, HasSubstr("resume "));
  EXPECT_THAT(failed.err, HasSubstr("pid " + std::to_string(children_[0].pid) + ": save failed: "));
  EXPECT_THAT(failed.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
  EXPECT_EQ(children_[0].Ask("check"), "ok");
  EXPECT_EQ(children_[1].Ask("check"), "ok");
  EXPECT_EQ(children_[0].Ask("write 0 3 77"), "ok");
  EXPECT_EQ(children_[1].Ask("read 0 3"), "ok 77");

  const Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const Ran rs = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_EQ(children_[1].Ask("read 0 3"), "ok 77");
}

TEST_F(CliCycleTest, CudaProcessWithoutEndpointRefusesAndJobKeepsRunning) {
  StartJob();
  int lonely[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, lonely), 0);
  Child& bare = Start("creator", lonely[0], /*bare=*/true);  // no shim: no endpoint
  ASSERT_EQ(bare.Line(), "ok");
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(::getpid()), "--state-dir",
                         dir_ + "/state"});
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("pid " + std::to_string(bare.pid) + " (lifecycle_cycle): a CUDA "
                                "process in the tree of pid " + std::to_string(::getpid()) +
                                " has no cusnap endpoint"));
  EXPECT_FALSE(fs::exists(dir_ + "/state"));
  const Ran st = Cusnap({"status", "--all", "--json"});
  const auto st_doc = nlohmann::json::parse(st.out);
  ASSERT_EQ(st_doc["participants"].size(), 2u);
  for (const auto& p : st_doc["participants"]) {
    EXPECT_EQ(p["phase"], "active");
  }
  EXPECT_EQ(children_[0].Ask("check"), "ok");
  EXPECT_EQ(children_[1].Ask("check"), "ok");
  ::close(lonely[0]);
  ::close(lonely[1]);
}

}  // namespace
