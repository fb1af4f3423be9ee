// Descriptor exhaustion, through the real `cusnap` (simulated driver, job_worker processes
// through `cusnap run`): an importer left with 0 to 4 free descriptors (its soft
// RLIMIT_NOFILE set from outside with prlimit) at checkpoint and at restore. A failure to get
// a descriptor fails that step and nothing else: the checkpoint is refused naming how many
// are free (the check never takes a count it could not make for plenty), the restore stops
// or is refused without dropping any mapping, and once the limit is lifted `recover` (or the
// next command) brings the job back with every byte.
#include <gmock/gmock.h>
#include <sys/resource.h>

#include <filesystem>
#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

class CliJobDescriptors : public JobTest {
 protected:
  void TearDown() override {
    LiftLimit();
    JobTest::TearDown();
  }

  /// A creator of A (device 0) shares it with an importer (device 1) that maps it.
  void StartJob() {
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    ASSERT_NO_FATAL_FAILURE(CreateFilled(*creator_, "A", 2, "dev", 0, "a", "0"));
    ASSERT_NO_FATAL_FAILURE(ShareMapped(*creator_, "A", *importer_, "ai", 2, "1"));
  }

  /// The importer's soft RLIMIT_NOFILE becomes its open descriptors + `free`.
  void LimitImporter(size_t free) {
    size_t open = 0;
    for ([[maybe_unused]] const auto& e :
         fs::directory_iterator("/proc/" + std::to_string(importer_->pid) + "/fd")) {
      ++open;
    }
    rlimit old{};
    ASSERT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, nullptr, &old), 0);
    if (!limited_) saved_ = old;
    limited_ = true;
    const rlimit low{open + free, old.rlim_max};
    ASSERT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, &low, nullptr), 0);
  }

  void LiftLimit() {
    if (!limited_ || importer_ == nullptr || importer_->pid <= 0) return;
    EXPECT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, &saved_, nullptr), 0);
    limited_ = false;
  }

  Ran Recover(const std::string& state) {
    std::vector<std::string> args = {"recover"};
    args.insert(args.end(), target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    return Cusnap(args);
  }

  /// Nothing was dropped for want of a descriptor: no creator was taken for dead.
  static void ExpectNothingDropped(const Ran& r) {
    EXPECT_THAT(r.err, Not(HasSubstr("cannot come back"))) << r.out << r.err;
    EXPECT_THAT(r.err, Not(HasSubstr("exited"))) << r.out << r.err;
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
  bool limited_ = false;
  rlimit saved_{};
};

// At every limit from 0 to 4 free descriptors the checkpoint is refused (the check wants the
// restore's imports + 16 spare), naming at most the free count and never passing for a count
// it could not make; the job runs on untouched, and with the limit lifted a full cycle works.
TEST_F(CliJobDescriptors, CheckpointAtEveryLimitIsRefusedAndTheJobRunsOn) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  for (size_t free = 0; free <= 4; ++free) {
    SCOPED_TRACE("free descriptors: " + std::to_string(free));
    ASSERT_NO_FATAL_FAILURE(LimitImporter(free));
    const Ran ck = Checkpoint(state);
    LiftLimit();
    EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
    if (free > 0) {
      // The endpoint answered: the resource check names the shortfall with its count (the
      // request's own connection holds one of them).
      EXPECT_THAT(ck.err, HasSubstr("descriptors (RLIMIT_NOFILE)")) << ck.out << ck.err;
      bool named = false;
      for (size_t k = 0; k <= free; ++k) {
        named = named || ck.err.find(", " + std::to_string(k) + " available") != std::string::npos;
      }
      EXPECT_TRUE(named) << ck.err;
    }
    EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
    CheckEveryByte();
    EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
  }
  CrossWrite(*creator_, "a", *importer_, "ai");
  Cycle(state);
}

// At every limit from 0 to 4 free descriptors a restore either works or stops (refused, or
// failed at a step it can run again) without dropping the importer's mapping: the creator
// lives, and the mapping comes back once the limit is lifted (by `recover`, exit 0), with
// every byte and the layout of before.
TEST_F(CliJobDescriptors, RestoreAtEveryLimitDropsNothingAndRecoverFinishesIt) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  for (size_t free = 0; free <= 4; ++free) {
    SCOPED_TRACE("free descriptors: " + std::to_string(free));
    const Snapshot before = Suspend(state);
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_NO_FATAL_FAILURE(LimitImporter(free));
    const Ran rs = Restore(state);
    LiftLimit();
    EXPECT_THAT(rs.status, AnyOf(0, kExitFailedAfterChange, kExitRestoreRefused))
        << rs.out << rs.err;
    // At 2 free or fewer the import cannot get its descriptor: the limit must show.
    if (free <= 2) {
      EXPECT_NE(rs.status, 0) << rs.out << rs.err;
    }
    ExpectNothingDropped(rs);
    if (rs.status == kExitRestoreRefused) {
      EXPECT_EQ(Phases(), std::vector<std::string>(2, "released"));
      const Ran again = Restore(state);
      EXPECT_EQ(again.status, 0) << again.out << again.err;
      ExpectNothingDropped(again);
    } else if (rs.status == kExitFailedAfterChange) {
      const Ran rc = Recover(state);
      EXPECT_EQ(rc.status, 0) << rc.out << rc.err;
      ExpectNothingDropped(rc);
    }
    EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
    ExpectResumed(before);
    ASSERT_FALSE(HasFatalFailure());
  }
}

}  // namespace
}  // namespace jobtest
