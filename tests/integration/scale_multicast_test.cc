// An 8-rank multicast team (simulated): multicast_rank processes under `cusnap run`,
// rank r on device r, every member bound with cuMulticastBindMem; checkpointed and restored
// through the real `cusnap` CLI, with the data through the team checked by the simulated
// driver's multimem all-reduce (simcuda_test_multimem_all_reduce) before and after.
#include <gmock/gmock.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/socket.h"
#include "scale_job.h"

namespace jobtest {
namespace {

constexpr size_t kRanks = static_cast<size_t>(kScaleRanks);

class ScaleMulticast : public ScaleJob {
 protected:
  /// Starts the team: rank 0 creates the object and sends its ticket on descriptor 3, the
  /// test relays it to the others, every rank answers "ok" once bound and mapped.
  void StartTeam() {
    const std::string bin = std::getenv("CUSNAP_TEST_BIN_DIR");
    for (int r = 0; r < kScaleRanks; ++r) {
      ranks_.push_back(&StartProgram(
          "rank" + std::to_string(r),
          {bin + "/cusnap", "run", "--", bin + "/multicast_rank", std::to_string(r),
           std::to_string(kScaleRanks), "mem", std::to_string(2u << 20), "0"}));
      ranks_.back()->cuda = false;  // answers the team's commands, not job_worker's
    }
    char byte = 0;
    int ticket = -1;
    const auto got = cusnap::RecvPacket(ranks_[0]->channel, &byte, 1, &ticket,
                                        cusnap::Deadline::AfterMs(kWaitMs));
    ASSERT_TRUE(got.ok()) << got.error().message;
    ASSERT_GE(ticket, 0) << "rank 0 sent no multicast ticket";
    for (size_t r = 1; r < kRanks; ++r) {
      const auto sent = cusnap::SendPacket(ranks_[r]->channel, "t", 1, ticket,
                                           cusnap::Deadline::AfterMs(kWaitMs));
      ASSERT_TRUE(sent.ok()) << sent.error().message;
    }
    ::close(ticket);
    for (Worker* r : ranks_) ASSERT_EQ(Ask(*r, ""), "ok") << r->name;
  }

  /// Every rank fills its member with rank+1, the last one all-reduces, every member holds
  /// the sum 1+...+8 = 36.
  void ExpectAllReduce() {
    for (size_t r = 0; r < kRanks; ++r) ASSERT_EQ(Ask(*ranks_[r], "fill " + std::to_string(r + 1)), "ok");
    ASSERT_EQ(Ask(*ranks_.back(), "reduce"), "ok");
    for (Worker* r : ranks_) EXPECT_EQ(Ask(*r, "check 36"), "ok") << r->name;
  }

  std::vector<Worker*> ranks_;
};

TEST_F(ScaleMulticast, EightRankBindMemTeamSurvivesACycle) {
  ASSERT_NO_FATAL_FAILURE(StartTeam());
  ASSERT_NO_FATAL_FAILURE(ExpectAllReduce());
  const std::vector<uint64_t> in_use = UsedBytes();
  ASSERT_EQ(in_use.size(), kRanks);
  for (size_t d = 0; d < kRanks; ++d) EXPECT_GE(in_use[d], uint64_t{2} << 20) << "device " << d;

  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  EXPECT_EQ(UsedBytes(), std::vector<uint64_t>(kRanks, 0)) << "device memory still in use";
  EXPECT_EQ(Phases(), std::vector<std::string>(kRanks, "released"));

  // Recorded: the object in every rank, all 8 devices added, one binding per device.
  const Ran shown = Cusnap({"inspect", state, "--json"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  size_t objects = 0, bindings = 0;
  const auto recorded = nlohmann::json::parse(shown.out);
  for (const auto& p : recorded["participants"]) {
    for (const auto& rec : p["records"]) {
      if (rec["kind"] == "multicast") {
        ++objects;
        EXPECT_EQ(rec["num_devices"], kScaleRanks);
        EXPECT_EQ(rec["id"]["creator_pid"], ranks_[0]->pid);
      }
      if (rec["kind"] == "multicast_binding") ++bindings;
    }
  }
  EXPECT_EQ(objects, kRanks);
  EXPECT_EQ(bindings, kRanks);

  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_EQ(UsedBytes(), in_use);
  EXPECT_EQ(Phases(), std::vector<std::string>(kRanks, "active"));
  for (Worker* r : ranks_) EXPECT_EQ(Ask(*r, "check 36"), "ok") << r->name << ": bytes came back";
  ASSERT_NO_FATAL_FAILURE(ExpectAllReduce());  // the team carries data again
}

}  // namespace
}  // namespace jobtest
