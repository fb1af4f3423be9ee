// The scale suite's fixture (the simulated part): the CLI integration harness
// (job_harness.h) on a simulated machine of 8 devices, one process per device, plus the
// shapes every scale scenario builds (ranks, a ring of imports, all-to-all imports).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {

/// Ranks (processes) and devices of the scale jobs: one device each.
inline constexpr int kScaleRanks = 8;

class ScaleJob : public JobTest {
 protected:
  void SetUp() override {
    JobTest::SetUp();
    // Every process of the test (workers, controllers, `cusnap`) sees the same 8 devices.
    ::setenv("SIMCUDA_DEVICE_COUNT", std::to_string(kScaleRanks).c_str(), 1);
    device_count_ = kScaleRanks;
  }

  /// Starts `n` job_workers through `cusnap run`, rank r on device r (named rank<r>).
  std::vector<Worker*> StartRanks(int n) {
    std::vector<Worker*> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(&Start("rank" + std::to_string(r), r));
    return ranks;
  }

  /// Rank r creates `count` 2 MiB allocations on its device (named <prefix><r>_<k>), maps
  /// each with access for its device and fills it; rank (r+1) % n imports and maps each with
  /// access for its own device (view name = allocation name).
  void BuildRing(const std::vector<Worker*>& ranks, const std::string& prefix, int count) {
    const size_t n = ranks.size();
    for (size_t r = 0; r < n; ++r) {
      const std::string dev = std::to_string(r);
      for (int k = 0; k < count; ++k) {
        const std::string a = prefix + dev + "_" + std::to_string(k);
        ASSERT_NO_FATAL_FAILURE(Create(*ranks[r], a, 2, "dev", static_cast<int>(r)));
        ASSERT_NO_FATAL_FAILURE(Map(*ranks[r], a, a, 0, 2, dev));
        ASSERT_NO_FATAL_FAILURE(Fill(*ranks[r], a));
      }
    }
    for (size_t r = 0; r < n; ++r) {
      Worker& next = *ranks[(r + 1) % n];
      const std::string dev = std::to_string((r + 1) % n);
      for (int k = 0; k < count; ++k) {
        const std::string a = prefix + std::to_string(r) + "_" + std::to_string(k);
        ASSERT_NO_FATAL_FAILURE(Share(*ranks[r], a, next));
        ASSERT_NO_FATAL_FAILURE(Map(next, a, a, 0, 2, dev));
      }
    }
  }

  /// Stops every worker (each must exit 0) and forgets the job, so that one test can build
  /// jobs of several sizes in a row on the same simulated machine.
  void EndJob() {
    views_.clear();
    device_allocations_.clear();
    for (Worker* w : Live()) {
      const std::string name = w->name;
      const int status = Stop(*w);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << name << " ended with wait status " << status;
    }
    workers_.clear();
  }
};

}  // namespace jobtest
