// Why cusnap exists (DRIVER-FACTS F5), on the simulated driver: the same two-process sharing
// job as the cusnap tests, started WITHOUT cusnap (no shim, a raw POSIX descriptor passed
// between the processes), suspended and resumed through the native checkpoint API alone.
// Lock and checkpoint succeed on both processes and the owner restores, but the importer's
// restore fails CUDA_ERROR_NOT_SUPPORTED (801), its unlock CUDA_ERROR_ILLEGAL_STATE (401),
// and it stays CHECKPOINTED for good: the only way out is to kill it. cli_job_cycles.cc runs
// this job through `cusnap checkpoint` / `cusnap restore` instead, and every byte survives.
#include <gmock/gmock.h>

#include "job_harness.h"

namespace jobtest {
namespace {

class NativeOnlyBaseline : public JobTest {};

TEST_F(NativeOnlyBaseline, ImporterRestoreFails801AndStaysCheckpointed) {
  Worker& owner = Start("owner", 0, /*bare=*/true);
  Worker& importer = Start("importer", 1, /*bare=*/true);
  Worker& controller = Start("controller", 0, /*bare=*/true);
  ASSERT_NO_FATAL_FAILURE(Create(owner, "A", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(owner, "a", "A", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(owner, "a"));
  ASSERT_NO_FATAL_FAILURE(Share(owner, "A", importer));  // a raw descriptor: no shim
  ASSERT_NO_FATAL_FAILURE(Map(importer, "a", "A", 0, 2, "1"));
  CheckEveryByte();
  const std::string o = Numbered(" ", owner.pid), i = Numbered(" ", importer.pid);

  EXPECT_EQ(Ask(controller, "lock" + o), "ok 0");
  EXPECT_EQ(Ask(controller, "lock" + i), "ok 0");
  EXPECT_EQ(Ask(controller, "checkpoint" + o), "ok 0");
  EXPECT_EQ(Ask(controller, "checkpoint" + i), "ok 0");
  EXPECT_EQ(Ask(controller, "state" + i), "ok " + std::to_string(kStateCheckpointed));
  EXPECT_EQ(Ask(controller, "restore" + o), "ok 0");
  EXPECT_EQ(Ask(controller, "restore" + i), "ok 801");  // CUDA_ERROR_NOT_SUPPORTED
  EXPECT_EQ(Ask(controller, "unlock" + i), "ok 401");   // CUDA_ERROR_ILLEGAL_STATE
  EXPECT_EQ(Ask(controller, "restore" + i), "ok 801");  // and so on, for ever
  EXPECT_EQ(Ask(controller, "state" + i), "ok " + std::to_string(kStateCheckpointed));
  EXPECT_EQ(Ask(controller, "unlock" + o), "ok 0");
  EXPECT_EQ(Ask(controller, "state" + o), "ok " + std::to_string(kStateRunning));

  // The importer can only be killed; the owner runs on with its bytes.
  Kill(importer);
  EXPECT_EQ(Ask(owner, "check a " + std::to_string(seeds_.at("A"))), "ok");
}

}  // namespace
}  // namespace jobtest
