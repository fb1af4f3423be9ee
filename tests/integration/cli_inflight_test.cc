// The in-flight-work test: two processes sharing one allocation
// (one creates and exports it, the other imports the ticket), each writing its half and
// verifying it, and reading the other half, in a loop of async memsets, copies, launches and
// graph replays on its own streams (job_workload.h), through ten `cusnap checkpoint` / `cusnap restore`
// cycles of the real binary on the simulated driver. While a command holds the job every
// driver call waits at the shim's gate and the devices are drained before save, so: every
// driver result the application saw is CUDA_SUCCESS and no write that returned success is
// lost (every word read back is the one written, a peer's words never go back).
#include <gmock/gmock.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "job_harness.h"

namespace jobtest {
namespace {

struct Counts {
  uint64_t iterations = 0, errors = 0, lost = 0;
  std::string first_error, first_lost;
};

Counts Parse(const std::string& reply) {
  std::istringstream in(reply);
  std::string ok;
  Counts c;
  in >> ok >> c.iterations >> c.errors >> c.lost >> c.first_error >> c.first_lost;
  EXPECT_EQ(ok, "ok") << reply;
  return c;
}

class CliInflight : public JobTest {
 protected:
  /// Waits until `w`'s workload has run `more` further iterations (it runs between cycles).
  Counts RunsOn(Worker& w, uint64_t more) {
    Counts start = Parse(Ask(w, "workload-counts"));
    Counts now = start;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (now.iterations < start.iterations + more && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      now = Parse(Ask(w, "workload-counts"));
    }
    EXPECT_GE(now.iterations, start.iterations + more) << w.name << "'s workload does not run on";
    return now;
  }
};

TEST_F(CliInflight, TenCyclesWhileBothProcessesWriteAndVerifySharedMemory) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(Create(creator, "A", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(creator, "a", "A", 0, 2, "0,1"));
  ASSERT_NO_FATAL_FAILURE(Share(creator, "A", importer));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "a", "A", 0, 2, "0,1"));
  ASSERT_EQ(Ask(creator, "workload a 0 2"), "ok");
  ASSERT_EQ(Ask(importer, "workload a 1 2"), "ok");

  const std::string state = dir_ + "/state";
  for (int cycle = 1; cycle <= 10; ++cycle) {
    RunsOn(creator, 3);
    RunsOn(importer, 3);
    const Ran checkpointed = Checkpoint(state);
    ASSERT_EQ(checkpointed.status, 0) << "cycle " << cycle << "\n" << checkpointed.out << checkpointed.err;
    const Ran restored = Restore(state);
    ASSERT_EQ(restored.status, 0) << "cycle " << cycle << "\n" << restored.out << restored.err;
  }
  RunsOn(creator, 3);
  RunsOn(importer, 3);

  for (Worker* w : {&creator, &importer}) {
    const Counts c = Parse(Ask(*w, "workload-stop"));
    EXPECT_EQ(c.errors, 0u) << w->name << ": first failed call " << c.first_error;
    EXPECT_EQ(c.first_error, "-") << w->name;
    EXPECT_EQ(c.lost, 0u) << w->name << ": words not as written, the first " << c.first_lost;
    EXPECT_GE(c.iterations, 40u) << w->name;
  }
  // The bytes are still shared: a word written by one process is read by the other.
  EXPECT_EQ(Ask(creator, "write a 7 4242"), "ok");
  EXPECT_EQ(Ask(importer, "read a 7"), "ok 4242");
}

}  // namespace
}  // namespace jobtest
