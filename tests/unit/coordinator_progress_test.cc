// What the progress bar is fed (PhaseObserver::BytesMoved): in save and reallocate, one call
// per participant as it finishes, with the running byte count out of the total the INSPECT
// records (save) or the state file (reallocate) announced; no other phase reports bytes.
// A non-CUDA participant (the driver does not know it) gets the lifecycle requests but no
// native calls.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "coordinator/coordinator.h"
#include "coordinator_printers.h"
#include "unit/coordinator_fakes.h"
#include "unit/coordinator_fixtures.h"

namespace cusnap::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

class BytesObserver final : public coord::PhaseObserver {
 public:
  void BytesMoved(const std::string& name, uint64_t done, uint64_t total) override {
    std::lock_guard lock(mu_);
    calls.push_back(name + " " + std::to_string(done) + "/" + std::to_string(total));
  }
  std::mutex mu_;
  std::vector<std::string> calls;
};

class ProgressTest : public FakeJobTest {
 protected:
  ProgressTest() : FakeJobTest("progress-test") {}
  void SetUp() override {
    FakeJobTest::SetUp();
    if (HasFatalFailure()) return;
    processes_[0].bytes[proto::Op::kReallocate] = kMiB2;  // and reallocates it
  }
};

TEST_F(ProgressTest, SaveAndReallocateReportBytesPerParticipant) {
  BytesObserver observer;
  auto ck = coord::Checkpoint({dir_, 0, ""}, FakeDiscoverer(processes_, job_), driver_, observer);
  ASSERT_EQ(ck.outcome, coord::Outcome::kOk) << ::testing::PrintToString(ck.errors);
  // The importer (0 bytes) and the creator (2 MiB) finish in either order.
  const std::string total = "/" + std::to_string(kMiB2);
  EXPECT_THAT(observer.calls, ::testing::AnyOf(ElementsAre("save 0" + total, "save " + std::to_string(kMiB2) + total),
                                               ElementsAre("save " + std::to_string(kMiB2) + total,
                                                           "save " + std::to_string(kMiB2) + total)));
  observer.calls.clear();
  auto rs = coord::Restore({dir_, {}}, FakeDiscoverer(processes_, job_), driver_, observer);
  ASSERT_EQ(rs.outcome, coord::Outcome::kOk) << ::testing::PrintToString(rs.errors);
  ASSERT_EQ(observer.calls.size(), 2u);
  EXPECT_EQ(observer.calls.back(), "reallocate " + std::to_string(kMiB2) + total);
}

TEST_F(ProgressTest, ParticipantTheDriverDoesNotKnowGetsNoNativeCalls) {
  FakeProcess launcher;  // a non-CUDA parent carrying the shim: no records, no driver state
  launcher.pid = 50;
  launcher.start = 4000;
  processes_.insert(processes_.begin(), launcher);
  coord::PhaseObserver quiet;
  auto ck = coord::Checkpoint({dir_, 0, ""}, FakeDiscoverer(processes_, job_), driver_, quiet);
  ASSERT_EQ(ck.outcome, coord::Outcome::kOk) << ::testing::PrintToString(ck.errors);
  EXPECT_THAT(job_.Only("release"), UnorderedElementsAre("release 50", "release 100", "release 200"));
  EXPECT_THAT(job_.Only("native_"), UnorderedElementsAre("native_lock 100 timeout 0", "native_lock 200 timeout 0",
                                                         "native_checkpoint 100", "native_checkpoint 200"));
  auto rs = coord::Restore({dir_, {}}, FakeDiscoverer(processes_, job_), driver_, quiet);
  ASSERT_EQ(rs.outcome, coord::Outcome::kOk) << ::testing::PrintToString(rs.errors);
  EXPECT_THAT(job_.Only("activate"), UnorderedElementsAre("activate 50", "activate 100", "activate 200"));
  EXPECT_EQ(job_.Only("native_restore").size(), 2u);
  EXPECT_EQ(job_.Only("native_unlock").size(), 2u);
}

}  // namespace
}  // namespace cusnap::testing
