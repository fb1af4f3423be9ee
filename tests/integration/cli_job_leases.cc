// Leases and other durations where they enter, through the real `cusnap` and a job's real
// endpoints (simulated driver, job_worker processes through `cusnap run`): CUSNAP_LEASE_MS
// past its range (0, past the maximum, 10000000000000, not a number) makes every command,
// `run` included, exit 2 naming the value and the range before anything starts; at the
// bounds (1, the maximum) it is taken. A same-user client's lifecycle request whose lease or
// drain is past its range is refused with the range named, and nothing changes: the job runs
// on, answers `status`, and checkpoints and restores.
#include <gmock/gmock.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/durations.h"
#include "common/endpoint_client.h"
#include "common/messages.h"
#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CliJobLeases : public JobTest {
 protected:
  /// A creator of A (device 0) shares it with an importer (device 1) that maps it.
  void StartJob() {
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    ASSERT_NO_FATAL_FAILURE(CreateFilled(*creator_, "A", 2, "dev", 0, "a", "0"));
    ASSERT_NO_FATAL_FAILURE(ShareMapped(*creator_, "A", *importer_, "ai", 2, "1"));
  }

  /// Sends `request` to `w`'s endpoint as a same-user client would.
  static cusnap::Result<cusnap::proto::StepReply> Send(const Worker& w,
                                                       const cusnap::proto::StepRequest& request) {
    return cusnap::Request<cusnap::proto::StepReply>(
        cusnap::EndpointPath(cusnap::ControlDir(), w.pid), request.Encode(), kWaitMs, request.op);
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
};

TEST_F(CliJobLeases, LeaseSettingPastItsRangeIsRefusedBeforeAnythingStarts) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  const std::string marker = dir_ + "/started";
  for (const std::string value : {"0", "3600001", "10000000000000", "abc"}) {
    SCOPED_TRACE("CUSNAP_LEASE_MS=" + value);
    cusnap_env_ = {"CUSNAP_LEASE_MS=" + value};
    const std::vector<std::vector<std::string>> commands = {
        {"checkpoint", "--all", "--state-dir", state},
        {"recover", "--all", "--state-dir", state},
        {"run", "--", "/bin/sh", "-c", "touch " + marker}};
    for (const auto& args : commands) {
      const Ran r = Cusnap(args);
      EXPECT_EQ(r.status, 2) << args.front() << ": " << r.out << r.err;
      EXPECT_THAT(r.err, HasSubstr("CUSNAP_LEASE_MS='" + value + "'")) << args.front();
      EXPECT_THAT(r.err, HasSubstr("is not a whole number of ms from 1 to 3600000"))
          << args.front();
      EXPECT_EQ(r.out, "") << args.front();
    }
    EXPECT_FALSE(fs::exists(marker));
    EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
  }
  cusnap_env_.clear();
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  CheckEveryByte();
}

TEST_F(CliJobLeases, LeaseSettingAtItsBoundsIsTaken) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  cusnap_env_ = {"CUSNAP_LEASE_MS=1"};
  const Ran st = Cusnap({"status", "--all"});
  EXPECT_EQ(st.status, 0) << st.out << st.err;
  cusnap_env_ = {"CUSNAP_LEASE_MS=" + std::to_string(cusnap::kMaxLeaseMs)};
  Cycle(dir_ + "/state");
}

TEST_F(CliJobLeases, StepRequestWithADurationPastItsRangeIsRefusedNamingTheRange) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  using cusnap::proto::Op;
  for (Worker* w : {creator_, importer_}) {
    for (const Op op : {Op::kRenew, Op::kQuiesce, Op::kSave, Op::kActivate}) {
      for (const uint64_t lease : {cusnap::kMaxLeaseMs + 1, uint64_t{10'000'000'000'000},
                                   UINT64_MAX}) {
        cusnap::proto::StepRequest request{op, 0, ""};
        request.lease_ms = lease;
        const auto reply = Send(*w, request);
        ASSERT_FALSE(reply.ok()) << w->name << " took lease_ms " << lease;
        EXPECT_THAT(reply.error().message,
                    HasSubstr("lease_ms " + std::to_string(lease) +
                              " ms is outside the range 0 (no lease) to 3600000 ms"));
      }
      cusnap::proto::StepRequest drain{op, cusnap::kMaxDrainMs + 1, ""};
      const auto reply = Send(*w, drain);
      ASSERT_FALSE(reply.ok()) << w->name << " took drain_ms " << drain.drain_ms;
      EXPECT_THAT(reply.error().message, HasSubstr("drain_ms 3600001 ms is outside the range 0"));
    }
    // In range: a renewal with no lease, the shortest and the longest changes nothing.
    for (const uint64_t lease : {uint64_t{0}, uint64_t{1}, cusnap::kMaxLeaseMs}) {
      cusnap::proto::StepRequest renew{Op::kRenew, 0, ""};
      renew.lease_ms = lease;
      const auto reply = Send(*w, renew);
      ASSERT_TRUE(reply.ok()) << w->name << " lease_ms " << lease << ": " << reply.error().message;
      EXPECT_EQ(reply.value().state, cusnap::proto::ShimState::kActive);
    }
  }
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  CheckEveryByte();
  CrossWrite(*creator_, "a", *importer_, "ai");
  Cycle(dir_ + "/state");
}

TEST_F(CliJobLeases, StepRequestWithACarrierPathThatIsNoFileStemIsRefusedNamingIt) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  using cusnap::proto::Op;
  struct Case {
    Op op;
    std::string path;
    std::string why;
  };
  const std::vector<Case> cases = {
      {Op::kSave, "/////", "carrier path '/////' names a folder, not the stem of its files"},
      {Op::kWriteCarrier, "/", "carrier path '/' names a folder, not the stem of its files"},
      {Op::kWriteCarrier, "/tmp/..", "carrier path '/tmp/..' names a folder"},
      {Op::kWriteCarrier, "relative/carrier", "carrier path 'relative/carrier' is not absolute"},
      {Op::kReadCarrier, "relative", "carrier path 'relative' is not absolute"},
  };
  for (Worker* w : {creator_, importer_}) {
    for (const Case& c : cases) {
      cusnap::proto::StepRequest request{c.op, 0, ""};
      request.carrier_path = c.path;
      const auto reply = Send(*w, request);
      ASSERT_FALSE(reply.ok()) << w->name << " took " << c.path;
      EXPECT_THAT(reply.error().message,
                  HasSubstr(std::string(cusnap::proto::OpName(c.op)) + " refused: " + c.why));
    }
  }
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  CheckEveryByte();
  Cycle(dir_ + "/state");
}

}  // namespace
}  // namespace jobtest
