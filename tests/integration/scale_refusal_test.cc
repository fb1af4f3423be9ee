// Refused checkpoints of an 8-process job on 8 simulated devices (the end-to-end refusals of
// cli_job_refusals.cc at scale): one process holds something cusnap must refuse;
// `cusnap checkpoint` exits 3 naming that process and writes no state file; all 8 ranks keep
// running untouched (every shim ACTIVE, every process RUNNING for the native API, the same
// driver facts at every view: VAs, allocations, handles, access; every byte; device memory
// still in use; writes crossing around the ring); once the cause is gone a full cycle works.
#include <gmock/gmock.h>

#include <filesystem>

#include "scale_job.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ScaleRefusal : public ScaleJob {
 protected:
  /// 8 ranks in a ring of imports (R<r>_0 created by rank r, mapped by r and r+1).
  void StartRing() {
    ranks_ = StartRanks(kScaleRanks);
    ASSERT_NO_FATAL_FAILURE(BuildRing(ranks_, "R", 1));
    CheckEveryByte();
  }

  /// Checkpoint refused (exit 3) with every one of `reasons` on stderr, no state file, and
  /// the job exactly as it was (ExpectUntouched against the facts from before).
  void ExpectRefused(const std::string& state, const std::vector<std::string>& reasons) {
    const Snapshot before = Snap();
    const std::vector<uint64_t> used = UsedBytes();
    const Ran ck = Checkpoint(state);
    EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
    for (const auto& reason : reasons) EXPECT_THAT(ck.err, HasSubstr(reason));
    EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
    EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
    ExpectUntouched(before, used);
  }

  /// Every shim ACTIVE, every rank RUNNING, the same facts at every view (the same
  /// allocations, not fresh ones), the same memory in use, every byte, and writes crossing
  /// from every rank to the next.
  void ExpectUntouched(const Snapshot& before, const std::vector<uint64_t>& used) {
    EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
    for (Worker* r : ranks_) EXPECT_EQ(NativeState(r->pid), kStateRunning) << r->name;
    const Snapshot after = Snap();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) {
      const ViewFacts &b = before[i], &a = after[i];
      const std::string where = views_[i].worker->name + " view " + views_[i].view;
      EXPECT_EQ(a.va, b.va) << where;
      EXPECT_EQ(a.size, b.size) << where;
      EXPECT_EQ(a.offset, b.offset) << where;
      EXPECT_EQ(a.allocation_id, b.allocation_id) << where << ": the same allocation, not a new one";
      EXPECT_EQ(a.location_type, b.location_type) << where;
      EXPECT_EQ(a.location_id, b.location_id) << where;
      EXPECT_EQ(a.access[0], b.access[0]) << where;
      EXPECT_EQ(a.access[1], b.access[1]) << where;
      EXPECT_EQ(a.retained, b.retained) << where;
    }
    EXPECT_EQ(UsedBytes(), used);
    CheckEveryByte();
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const std::string view = Numbered("R", static_cast<long long>(r), "_0");
      CrossWrite(*ranks_[r], view, *ranks_[(r + 1) % ranks_.size()], view);
    }
  }

  std::vector<Worker*> ranks_;
};

// Rank 5 created O, shared it with rank 6, then released both its handle and its mapping
// while rank 6 still maps it: no process could bring O back after a restore.
TEST_F(ScaleRefusal, OneOfEightRanksReleasedAnAllocationItsImporterStillMaps) {
  ASSERT_NO_FATAL_FAILURE(StartRing());
  Worker& creator = *ranks_[5];
  Worker& importer = *ranks_[6];
  ASSERT_NO_FATAL_FAILURE(Create(creator, "O", 2, "dev", 5));
  ASSERT_NO_FATAL_FAILURE(Map(creator, "o", "O", 0, 2, "5"));
  ASSERT_NO_FATAL_FAILURE(Fill(creator, "o"));
  ASSERT_NO_FATAL_FAILURE(Share(creator, "O", importer));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "o", "O", 0, 2, "6"));
  ASSERT_NO_FATAL_FAILURE(Unmap(creator, "o"));
  ASSERT_NO_FATAL_FAILURE(Release(creator, "O", /*freed=*/false));
  const std::string state = dir_ + "/state";
  const std::string named = "pid " + std::to_string(creator.pid);
  ASSERT_NO_FATAL_FAILURE(ExpectRefused(
      state, {named + ": allocation ", " of " + named + " is still held or mapped by pid " +
                                           std::to_string(importer.pid) +
                                           ", but its creator released both its handle and its mappings"}));
  EXPECT_EQ(Ask(importer, "write o 17 4711"), "ok");
  EXPECT_EQ(Ask(importer, "read o 17"), "ok 4711");
  // Once the importer lets go of it, the 8-rank job checkpoints and restores.
  ASSERT_NO_FATAL_FAILURE(Unmap(importer, "o"));
  ASSERT_NO_FATAL_FAILURE(Release(importer, "O", /*freed=*/true));
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// A ninth CUDA process in the tree, on device 3, was started without the shim: its sharing
// is unknown.
TEST_F(ScaleRefusal, ACudaProcessWithoutTheShimBesideEightRanks) {
  ASSERT_NO_FATAL_FAILURE(StartRing());
  Worker& bare = Start("bare", 3, /*bare=*/true);
  ASSERT_NO_FATAL_FAILURE(Create(bare, "P", 2, "dev", 3));
  ASSERT_NO_FATAL_FAILURE(Map(bare, "p", "P", 0, 2, "3"));
  ASSERT_NO_FATAL_FAILURE(Fill(bare, "p"));
  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(ExpectRefused(
      state, {"pid " + std::to_string(bare.pid) + " (job_worker): a CUDA process in the tree of pid " +
              PidArg() + " has no cusnap endpoint in " + dir_ + "/control"}));
  ASSERT_EQ(Stop(bare), 0);
  std::erase_if(views_, [&](const ViewRecord& v) { return v.worker == &bare; });
  device_allocations_.erase("P");
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

}  // namespace
}  // namespace jobtest
