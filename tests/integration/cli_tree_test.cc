// A job whose parent is no CUDA process but carries the shim (a launcher started with
// `cusnap run` that forks a CUDA creator and importer): `cusnap checkpoint --pid <launcher>`
// takes all three as participants, sends the lifecycle requests to every one and the native
// checkpoint calls only to the two the driver knows; the full cycle succeeds and every byte
// and the sharing survive it.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
namespace {

using cusnap::testing::Env;
using cusnap::testing::LineChannel;
using cusnap::testing::Ran;
using ::testing::HasSubstr;

/// One peer's command channel (lifecycle_cycle_peer's line protocol).
using Channel = LineChannel;

using cusnap::testing::ProcState;

class CliTreeTest : public cusnap::testing::OwnMachineTest {
 protected:
  CliTreeTest() : OwnMachineTest("tree-test") {}
  void TearDown() override {
    if (launcher_ > 0) {
      for (Channel* c : {&creator_, &importer_}) {
        if (c->in) std::fprintf(c->in, "exit\n"), std::fclose(c->in);
        if (c->out) std::fclose(c->out);
      }
      int status = 0;
      ::waitpid(launcher_, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "launcher status " << status;
    }
    OwnMachineTest::TearDown();
  }

  /// `cusnap run -- cli_tree_launcher lifecycle_cycle_peer`, the peers' pipes on the
  /// launcher's descriptors 0/1 (creator) and 4/5 (importer).
  void StartJob() {
    int c_in[2], c_out[2], i_in[2], i_out[2];
    for (int* p : {c_in, c_out, i_in, i_out}) ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
    const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
    launcher_ = cusnap::testing::Spawn(
        {bin + "/cusnap", "run", "--", bin + "/cli_tree_launcher", bin + "/lifecycle_cycle_peer"},
        {{c_in[0], 0}, {c_out[1], 1}, {i_in[0], 4}, {i_out[1], 5}});
    for (int fd : {c_in[0], c_out[1], i_in[0], i_out[1]}) ::close(fd);
    creator_ = Channel{::fdopen(c_in[1], "w"), ::fdopen(c_out[0], "r")};
    importer_ = Channel{::fdopen(i_in[1], "w"), ::fdopen(i_out[0], "r")};
    ASSERT_GT(launcher_, 0);
    ASSERT_EQ(creator_.Line(), "ok");
    ASSERT_EQ(importer_.Line(), "ok");
  }

  pid_t launcher_ = -1;
  Channel creator_, importer_;
};

TEST_F(CliTreeTest, NonCudaLauncherWithTheShimIsAParticipantWithoutNativeCalls) {
  StartJob();
  const std::string pid = std::to_string(launcher_);
  const std::string state = dir_ + "/state";

  // The launcher has an endpoint of its own: three participants, one without records.
  const Ran before = Cusnap({"status", "--pid", pid, "--json"});
  ASSERT_EQ(before.status, 0) << before.err;
  const auto st = nlohmann::json::parse(before.out);
  ASSERT_EQ(st["participants"].size(), 3u);
  EXPECT_EQ(st["participants"][0]["pid"], launcher_);
  EXPECT_EQ(st["participants"][0]["allocations"], 0);

  const Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state, "--json"});
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const auto ck_doc = nlohmann::json::parse(ck.out);
  EXPECT_EQ(ck_doc["outcome"], "ok");
  for (const auto& phase : ck_doc["phases"]) EXPECT_EQ(phase["participants"], 3) << phase.dump();
  EXPECT_EQ(ck_doc["phases"].back()["name"], "checkpoint");

  const Ran parked = Cusnap({"status", "--pid", pid, "--json"});
  const auto parked_doc = nlohmann::json::parse(parked.out);
  ASSERT_EQ(parked_doc["participants"].size(), 3u);
  for (const auto& p : parked_doc["participants"]) {
    EXPECT_EQ(p["phase"], "released") << p.dump();
  }

  const Ran rs = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(rs.out, HasSubstr("restore: done"));
  EXPECT_EQ(creator_.Ask("check"), "ok");
  EXPECT_EQ(importer_.Ask("check"), "ok");
  EXPECT_EQ(importer_.Ask("write 2 9 31337"), "ok");
  EXPECT_EQ(creator_.Ask("read 2 9"), "ok 31337");
  EXPECT_EQ(creator_.Ask("write 1 5 4711"), "ok");
  EXPECT_EQ(importer_.Ask("read 1 5"), "ok 4711");
}

// The hold after a command (shim/lifecycle/lifecycle.h) holds the processes the native
// checkpoint held, never the launcher that did not use CUDA, not even after a restore that
// continued the job was killed (found on the GPU: torchrun's agent stopped itself).
TEST_F(CliTreeTest, ARestoreKilledAfterItContinuedTheJobHoldsItsCudaProcessesOnly) {
  StartJob();
  const std::string pid = std::to_string(launcher_);
  const std::string state = dir_ + "/state";
  ::setenv("CUSNAP_HOLD", "stop", 1);
  ::setenv("CUSNAP_LEASE_MS", "1000", 1);
  const Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const std::string control = Env("CUSNAP_CONTROL_DIR");
  std::vector<pid_t> peers;
  for (const auto& e : std::filesystem::directory_iterator(control)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".held")) peers.push_back(std::stoi(name));
  }
  ASSERT_EQ(peers.size(), 2u) << "the two CUDA peers are held, not the launcher";
  const Ran killed = cusnap::testing::RunCommand(
      "cd " + dir_ + " || exit; CUSNAP_TEST_PAUSE_AT=restore:match:after " +
          Env("CUSNAP_TEST_BIN_DIR") + "/cusnap restore --pid " + pid + " --state-dir " + state +
          " >r.out 2>r.err & cli=$!; until grep -q '^State:.*stopped' /proc/$cli/status; do "
          "sleep 0.05; done; kill -KILL $cli; wait $cli; echo $?",
      dir_);
  ASSERT_EQ(killed.out, "137\n") << killed.err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (const pid_t peer : peers) {
    const std::string marker = control + "/" + std::to_string(peer) + ".held";
    while ((ProcState(peer) != 'T' || !std::filesystem::exists(marker)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(ProcState(peer), 'T') << "pid " << peer << " runs on, not held";
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a lease more
  EXPECT_NE(ProcState(launcher_), 'T') << "the launcher (no CUDA) was stopped";
  EXPECT_FALSE(std::filesystem::exists(control + "/" + pid + ".held"));
  const Ran rs = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ::unsetenv("CUSNAP_HOLD");
  ::unsetenv("CUSNAP_LEASE_MS");
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_EQ(creator_.Ask("check"), "ok");
  EXPECT_EQ(importer_.Ask("check"), "ok");
}

}  // namespace
