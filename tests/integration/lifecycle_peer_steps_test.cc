// Step requests to one shim of a sharing pair that its peer's phase does not allow, through a
// job's real endpoints (job_worker processes through `cusnap run`, simulated driver), as a
// same-user client may send them: the creator alone walks a whole cycle (QUIESCE .. RELEASE,
// then REALLOCATE .. ACTIVATE) while its importer stays ACTIVE, mapping the allocation from
// before the release. A fresh allocation then would split the pair (each process with memory
// of its own, the creator's writes never seen by the importer), so the creator's REALLOCATE
// is refused, naming the importer, and nothing is created; `cusnap recover` then takes the
// importer through the cycle too and the pair shares one allocation again, every byte kept.
#include <gmock/gmock.h>

#include <string>
#include <vector>

#include "common/endpoint_client.h"
#include "common/messages.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using cusnap::proto::Op;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

class LifecyclePeerSteps : public JobTest {
 protected:
  /// Sends `op` (no lease) to `w`'s endpoint as a same-user client would.
  static cusnap::Result<cusnap::proto::StepReply> Send(const Worker& w, Op op) {
    const cusnap::proto::StepRequest request{op, 0, op == Op::kSave ? "alone" : ""};
    return cusnap::Request<cusnap::proto::StepReply>(
        cusnap::EndpointPath(cusnap::ControlDir(), w.pid), request.Encode(), kWaitMs, op);
  }
};

TEST_F(LifecyclePeerSteps, ACreatorWhoseImporterStillHoldsTheOldAllocationIsRefusedItsReallocate) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(ShareBothWays(creator, importer));
  const Snapshot before = Snap();

  // The creator's half of a checkpoint: every step is its own to take.
  for (const Op op : {Op::kQuiesce, Op::kSave, Op::kDetachMulticast, Op::kRelease}) {
    auto step = Send(creator, op);
    ASSERT_TRUE(step.ok()) << cusnap::proto::OpName(op) << ": " << step.error().message;
  }
  // The importer still maps A from before the release: a fresh A would not be what it maps.
  auto reallocated = Send(creator, Op::kReallocate);
  ASSERT_FALSE(reallocated.ok()) << "REALLOCATE created A again while pid " << importer.pid
                                 << " still holds the old A";
  EXPECT_THAT(reallocated.error().message, HasSubstr("pid " + std::to_string(importer.pid)));
  EXPECT_THAT(reallocated.error().message, HasSubstr("still holds"));
  EXPECT_THAT(reallocated.error().message, HasSubstr("cusnap recover"));
  for (const Op op : {Op::kImport, Op::kActivate}) EXPECT_FALSE(Send(creator, op).ok());
  EXPECT_THAT(Phases(), UnorderedElementsAre("released", "active"));
  // Nothing was created: the device holds A (kept by the importer) and B, as before.
  EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());

  const Ran rc = Cusnap({"recover", "--all"});
  EXPECT_EQ(rc.status, 0) << rc.out << rc.err;
  ASSERT_EQ(Phases(), std::vector<std::string>(2, "active")) << rc.out << rc.err;
  // Both went round (the importer too): every byte, same VAs, fresh allocations shared as
  // before, writes crossing both ways, and the memory in use is the job's own again.
  ExpectResumed(before);
  EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
  Cycle(dir_ + "/state");
}

}  // namespace
}  // namespace jobtest
