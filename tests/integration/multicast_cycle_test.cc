// Multicast teams through the real `cusnap` CLI on the simulated driver: 2- and 4-process
// teams (multicast_rank.cc) started with `cusnap run`, checkpointed and restored with
// `cusnap checkpoint/restore --pid <this test>`, and the data through the team checked with
// the simulated driver's multimem all-reduce before and after. Covered: BindMem and BindAddr
// in both ABIs (each resolved through cuGetProcAddress_v2 by version), a rank that unbinds
// and rebinds with BindAddr (PyTorch), a creator that released its creation handle after
// everyone imported (an object with no live handle but a live mapping), binds past the
// requested size under capacity rounding, a fault at every detach step (refused with the
// team intact: exit 3) and after the first release (exit 4), a fault at every rebuild step
// (exit 4 naming the process, the object and the step), and a partial team refused before
// anything changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/socket.h"

namespace {

namespace fs = std::filesystem;
using cusnap::testing::Child;
using cusnap::testing::Env;
using cusnap::testing::Ran;
using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;
/// Bound on waiting for a rank's ticket, ms (ASan, loaded 2-core machine).
constexpr int kTicketWaitMs = 90'000;

struct RankProcess : Child {
  int socket = -1;  // the test's end of the rank's descriptor 3
};

class MulticastCycleTest : public cusnap::testing::OwnMachineTest {
 protected:
  MulticastCycleTest() : OwnMachineTest("multicast-test") {}
  void SetUp() override {
    OwnMachineTest::SetUp();
    ::setenv("SIMCUDA_DEVICE_COUNT", "4", 1);
    ::unsetenv("SIMCUDA_MULTICAST_ROUND_BYTES");
    ::unsetenv("SIMCUDA_FAULTS");
  }
  void TearDown() override {
    for (auto& r : ranks_) {
      if (r.pid <= 0) continue;
      const int status = r.Stop();
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank status " << status;
      ::close(r.socket);
    }
    OwnMachineTest::TearDown();
  }

  RankProcess StartRank(int rank, int n, const std::string& abi, size_t mc_size, size_t bind_offset) {
    int sockets[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets), 0);
    const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
    std::vector<std::string> command = {bin + "/multicast_rank", std::to_string(rank),
                                        std::to_string(n), abi, std::to_string(mc_size),
                                        std::to_string(bind_offset)};
    // A rank in without_shim_ starts bare (it links the simulated driver itself).
    if (!without_shim_.contains(rank)) command.insert(command.begin(), {bin + "/cusnap", "run", "--"});
    const RankProcess r{cusnap::testing::StartChild(command, {{sockets[1], 3}}), sockets[0]};
    ::close(sockets[1]);
    EXPECT_GT(r.pid, 0);
    return r;
  }

  /// Starts an n-rank team binding through `abis[rank]`; every rank says "ok" once bound and
  /// mapped. Rank 0's ticket is relayed to the others.
  void StartTeam(const std::vector<std::string>& abis, size_t mc_size = 2 * kMiB,
                 size_t bind_offset = 0) {
    const int n = static_cast<int>(abis.size());
    for (int rank = 0; rank < n; ++rank) {
      ranks_.push_back(StartRank(rank, n, abis[static_cast<size_t>(rank)], mc_size, bind_offset));
    }
    char byte = 0;
    int ticket = -1;
    const auto got = cusnap::RecvPacket(ranks_[0].socket, &byte, 1, &ticket,
                                        cusnap::Deadline::AfterMs(kTicketWaitMs));
    ASSERT_TRUE(got.ok()) << got.error().message;
    ASSERT_GE(ticket, 0);
    for (int rank = 1; rank < n; ++rank) {
      const auto sent = cusnap::SendPacket(ranks_[static_cast<size_t>(rank)].socket, &byte, 1,
                                           ticket, cusnap::Deadline::AfterMs(kTicketWaitMs));
      ASSERT_TRUE(sent.ok()) << sent.error().message;
    }
    ::close(ticket);
    for (auto& r : ranks_) ASSERT_EQ(r.Line(), "ok");
  }

  /// Every rank fills its member with rank+1, one all-reduce, every member holds the sum.
  void ExpectAllReduce() {
    const size_t n = ranks_.size();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(ranks_[i].Ask("fill " + std::to_string(i + 1)), "ok");
    ASSERT_EQ(ranks_[n - 1].Ask("reduce"), "ok");
    const std::string sum = std::to_string(n * (n + 1) / 2);
    for (auto& r : ranks_) EXPECT_EQ(r.Ask("check " + sum), "ok");
  }

  Ran Checkpoint() { return Cusnap({"checkpoint", "--pid", std::to_string(::getpid()), "--state-dir", dir_ + "/state"}); }
  Ran Restore() { return Cusnap({"restore", "--pid", std::to_string(::getpid()), "--state-dir", dir_ + "/state"}); }

  /// One full cycle; the team carries data before and after.
  void Cycle() {
    const Ran ck = Checkpoint();
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    const Ran rs = Restore();
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  }

  /// The multicast records of the state file, by kind.
  std::vector<nlohmann::json> StateRecords(const std::string& kind) {
    const Ran shown = Cusnap({"inspect", dir_ + "/state", "--json"});
    EXPECT_EQ(shown.status, 0) << shown.err;
    std::vector<nlohmann::json> out;
    const auto doc = nlohmann::json::parse(shown.out);
    for (const auto& p : doc["participants"]) {
      for (const auto& r : p["records"]) {
        if (r["kind"] == kind) out.push_back(r);
      }
    }
    return out;
  }

  std::string Pid(size_t rank) const { return "pid " + std::to_string(ranks_[rank].pid); }
  std::string Object() const { return "multicast object 1 of " + Pid(0); }

  std::vector<RankProcess> ranks_;
  std::set<int> without_shim_;  // ranks StartTeam starts without `cusnap run`
};

TEST_F(MulticastCycleTest, TwoRanksBindMemBothAbisSurviveTwoCycles) {
  StartTeam({"mem", "mem2"});
  ExpectAllReduce();
  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const Ran ck = Checkpoint();
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    // Recorded: one object in each rank, its creator rank 0, both devices added and bound.
    const auto objects = StateRecords("multicast");
    ASSERT_EQ(objects.size(), 2u);
    for (const auto& o : objects) {
      EXPECT_EQ(o["num_devices"], 2);
      EXPECT_EQ(o["object_size"], 2 * kMiB);
      EXPECT_EQ(o["extent"], 2 * kMiB);
      EXPECT_EQ(o["id"]["creator_pid"], ranks_[0].pid);
    }
    const auto bindings = StateRecords("multicast_binding");
    ASSERT_EQ(bindings.size(), 2u);
    EXPECT_EQ(bindings[0]["bind_kind"], 1);
    EXPECT_EQ(bindings[0]["bind_api"], 1);
    EXPECT_EQ(bindings[1]["bind_api"], 2);
    EXPECT_EQ(StateRecords("multicast_device").size(), 2u);
    EXPECT_EQ(StateRecords("multicast_mapping").size(), 2u);
    const Ran rs = Restore();
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    // Bytes came back (the last all-reduce's sum), and the team carries data again.
    for (auto& r : ranks_) EXPECT_EQ(r.Ask("check 3"), "ok");
    ExpectAllReduce();
  }
  EXPECT_EQ(ranks_[1].Ask("retain"), "ok same");
}

// Restored onto swapped GPUs (DRIVER-FACTS F7, measured): each rank keeps its ordinals, so
// members and the team's devices are rebuilt on the recorded ordinals, now backed by the
// other GPUs; the members' bytes are intact and the team carries data again.
TEST_F(MulticastCycleTest, RestoreOntoSwappedDevices) {
  StartTeam({"mem", "addr2"});
  ExpectAllReduce();
  const Ran ck = Checkpoint();
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const Ran rs = Cusnap({"restore", "--pid", std::to_string(::getpid()), "--state-dir",
                         dir_ + "/state", "--device-map", "0=1,1=0"});
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  for (auto& r : ranks_) EXPECT_EQ(r.Ask("check 3"), "ok");
  ExpectAllReduce();
}

TEST_F(MulticastCycleTest, FourRanksBindAddrRebindAndCreatorWithoutHandle) {
  StartTeam({"addr", "addr2", "mem", "mem2"});
  // PyTorch unbinds its member and binds it again by address; the creator drops its
  // creation handle once everyone imported (the object lives on through its mapping).
  ASSERT_EQ(ranks_[2].Ask("rebind"), "ok");
  ASSERT_EQ(ranks_[0].Ask("release"), "ok");
  ExpectAllReduce();
  const Ran ck = Checkpoint();
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const auto objects = StateRecords("multicast");
  ASSERT_EQ(objects.size(), 4u);
  EXPECT_EQ(objects[0]["handle_count"], 0);  // rank 0: no live handle, a live mapping
  EXPECT_THAT(objects[0]["flags"].dump(), HasSubstr("creator"));
  const auto bindings = StateRecords("multicast_binding");
  ASSERT_EQ(bindings.size(), 4u);
  EXPECT_EQ(bindings[2]["bind_kind"], 2);  // rank 2 rebound by address (v1)
  EXPECT_EQ(bindings[2]["bind_api"], 1);
  EXPECT_EQ(bindings[2]["member"]["creator_pid"], ranks_[2].pid);  // a tracked member
  const Ran rs = Restore();
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  for (auto& r : ranks_) EXPECT_EQ(r.Ask("check 10"), "ok");
  ExpectAllReduce();
  EXPECT_EQ(ranks_[0].Ask("retain"), "ok same");  // the handle value the VA was mapped with
  Cycle();
  ExpectAllReduce();
}

TEST_F(MulticastCycleTest, BindsPastTheRequestedSizeUnderCapacityRounding) {
  ::setenv("SIMCUDA_MULTICAST_ROUND_BYTES", std::to_string(8 * kMiB).c_str(), 1);
  // 2 MiB requested, 8 MiB of capacity: members bound at 4 MiB, mapped up to 6 MiB.
  StartTeam({"mem2", "addr"}, 2 * kMiB, 4 * kMiB);
  ExpectAllReduce();
  const Ran ck = Checkpoint();
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  for (const auto& o : StateRecords("multicast")) {
    EXPECT_EQ(o["object_size"], 2 * kMiB);
    EXPECT_EQ(o["extent"], 6 * kMiB);  // what the driver accepted
  }
  const Ran rs = Restore();
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  ExpectAllReduce();
}

// A fault at each detach step in every rank: nothing was released anywhere, each rank put
// its part back, the checkpoint is refused with the team intact and the job keeps running.
TEST_F(MulticastCycleTest, DetachFaultBeforeAnyReleaseRefusesWithTheTeamIntact) {
  StartTeam({"mem", "addr2"});
  for (const char* step : {"cuMemUnmap", "cuMulticastUnbind", "cuMemRelease"}) {
    SCOPED_TRACE(step);
    // SAVE runs first, and its carrier unmaps its staging mapping of the member once: the
    // detach's cuMemUnmap is the second.
    const std::string nth = std::string(step) == "cuMemUnmap" ? " 2" : " 1";
    for (auto& r : ranks_) ASSERT_EQ(r.Ask(std::string("fault ") + step + nth + " 999"), "ok");
    const Ran ck = Checkpoint();
    EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
    EXPECT_THAT(ck.err, HasSubstr(": detach_multicast failed: " + std::string(step)));
    EXPECT_THAT(ck.err, HasSubstr("failed with CUDA_ERROR_UNKNOWN (999) for " + Object()));
    EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
    const auto st = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
    for (const auto& p : st["participants"]) EXPECT_EQ(p["phase"], "active");
    ExpectAllReduce();
  }
  Cycle();
  ExpectAllReduce();
}

// One rank's release fails after the other rank released its object: neither can be put
// back, so the checkpoint rolls the job forward (the failed release run again, then the
// rebuild), names the process, the object and the step, exits 4 and the team carries data.
TEST_F(MulticastCycleTest, DetachFaultAfterAReleaseRollsTheTeamForward) {
  StartTeam({"mem", "mem"});
  ASSERT_EQ(ranks_[1].Ask("fault cuMemRelease 1 999"), "ok");
  const Ran ck = Checkpoint();
  EXPECT_EQ(ck.status, 4) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr(Pid(1) + ": detach_multicast failed: cuMemRelease failed with "
                                "CUDA_ERROR_UNKNOWN (999) for " + Object()));
  EXPECT_THAT(ck.err, HasSubstr(Pid(0) + ": resume failed: RESUME refused in phase "
                                "MULTICAST_DETACHED"));
  EXPECT_THAT(ck.err, HasSubstr("FAILED in phase 'detach_multicast' after the point of no "
                                "return; the job was rolled forward and runs as before"));
  const auto st = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
  for (const auto& p : st["participants"]) EXPECT_EQ(p["phase"], "active");
  ExpectAllReduce();
  Cycle();
  ExpectAllReduce();
}

// A fault at each rebuild step, on one rank: the restore fails loudly naming the process, the
// object and the step (no rank goes past the step's barrier), and `cusnap restore` again
// finishes the job from where each rank stands: the team carries data.
TEST_F(MulticastCycleTest, RebuildFaultFailsTheRestoreAndRestoreAgainFinishes) {
  struct Case {
    size_t rank;
    const char* fault;  // name nth
    const char* step;
    const char* call;
  };
  // cuMemMap's 4th call from the injection is the multicast map: before it come the host
  // carrier's staging map at SAVE, the member mapped again at REALLOCATE and the carrier's
  // staging map there (carrier.cc).
  const Case cases[] = {{0, "cuMulticastCreate 1", "multicast_create", "cuMulticastCreate"},
                        {1, "cuMemImportFromShareableHandle 1", "multicast_import",
                         "cuMemImportFromShareableHandle"},
                        {1, "cuMulticastAddDevice 1", "multicast_join", "cuMulticastAddDevice of device 1"},
                        {0, "cuMulticastBindMem 1", "multicast_bind", "cuMulticastBindMem of device 0"},
                        {1, "cuMemMap 4", "multicast_bind", "cuMemMap at "}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fault);
    StartTeam({"mem", "mem2"});
    ASSERT_EQ(ranks_[c.rank].Ask(std::string("fault ") + c.fault + " 999"), "ok");
    const Ran ck = Checkpoint();
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    const Ran rs = Restore();
    EXPECT_EQ(rs.status, 4) << rs.out << rs.err;
    EXPECT_THAT(rs.err, HasSubstr(Pid(c.rank) + ": " + c.step + " failed: "));
    EXPECT_THAT(rs.err, HasSubstr(c.call));
    EXPECT_THAT(rs.err, HasSubstr("failed with CUDA_ERROR_UNKNOWN (999) for " + Object()));
    const Ran again = Restore();
    EXPECT_EQ(again.status, 0) << again.out << again.err;
    ExpectAllReduce();
    TearDown();
    ranks_.clear();
    SetUp();
  }
}

// The team's creator runs without the shim (started outside `cusnap run`) inside the tree
// being checkpointed: the object reaches the other member as a plain descriptor that cusnap
// could never rebuild. Refused before anything changes, naming the process without the
// shim; the team keeps carrying data.
TEST_F(MulticastCycleTest, TeamWhoseCreatorHasNoShimIsRefusedBeforeAnythingChanges) {
  without_shim_ = {0};
  StartTeam({"mem", "mem2"});
  ExpectAllReduce();
  const Ran ck = Checkpoint();
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr(Pid(0)));
  EXPECT_THAT(ck.err, HasSubstr("no cusnap endpoint"));
  EXPECT_THAT(ck.err, HasSubstr("nothing was changed"));
  EXPECT_FALSE(fs::exists(dir_ + "/state/cusnap-state.json"));
  const auto st = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
  ASSERT_EQ(st["participants"].size(), 1u);  // rank 1 only: rank 0 has no endpoint
  EXPECT_EQ(st["participants"][0]["phase"], "active");
  ExpectAllReduce();
}

// Only one member of a two-device team is checkpointed (the other is outside the process
// tree given): refused before anything changes, naming the object and the process.
TEST_F(MulticastCycleTest, PartialTeamIsRefusedBeforeAnythingChanges) {
  StartTeam({"mem", "mem2"});
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(ranks_[0].pid), "--state-dir",
                         dir_ + "/state"});
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr(Object() + " is a partial team"));
  EXPECT_THAT(ck.err, HasSubstr("added: " + Pid(0) + " device 0; members checkpointed: " + Pid(0)));
  EXPECT_FALSE(fs::exists(dir_ + "/state/cusnap-state.json"));
  const auto st = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
  for (const auto& p : st["participants"]) EXPECT_EQ(p["phase"], "active");
  ExpectAllReduce();
}

}  // namespace
