// Phase cost against the size of the job (phase times at 2, 4 and 8 ranks; goal: topology
// phases grow no faster than the number of allocations), on the simulated driver:
// rings of 2, 4 and 8 ranks with 8 allocations per rank, and 8 ranks with 64, each
// checkpointed and restored twice through the real `cusnap` CLI (`--json`), the best of the
// two kept per phase. Prints one line per job (a table for the notes) and asserts
// that the topology phases (inspect, validate, quiesce, release, import, verify) grow less than
// twice as fast as the allocations from 8 to 64 per rank. Time bounds are deliberately loose
// (a factor 16 for 8x the allocations, over a 5 ms floor) so a loaded CI machine cannot fail
// them; a quadratic topology step (64x) still does.
#include <gmock/gmock.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "scale_job.h"

namespace jobtest {
namespace {

/// Phase name -> best elapsed ms over the cycles run.
using PhaseTimes = std::map<std::string, double>;

const std::set<std::string> kTopologyPhases = {"inspect", "validate", "quiesce",
                                               "release", "import",   "verify"};

class ScalePhaseCost : public ScaleJob {
 protected:
  /// Builds a ring of `ranks` ranks with `allocations` 2 MiB allocations each (every one
  /// imported by the next rank), runs two checkpoint/restore cycles with `--json`, checks
  /// every byte after them, prints the table line and ends the job. Returns the best times.
  PhaseTimes Measure(int ranks, int allocations) {
    PhaseTimes best;
    const std::vector<Worker*> w = StartRanks(ranks);
    BuildRing(w, "P", allocations);
    if (HasFatalFailure()) return best;
    const std::string state = dir_ + "/state-" + std::to_string(ranks) + "x" + std::to_string(allocations);
    for (int cycle = 0; cycle < 2; ++cycle) {
      for (const char* command : {"checkpoint", "restore"}) {
        std::vector<std::string> args = {command};
        args.insert(args.end(), target_.begin(), target_.end());
        args.insert(args.end(), {"--state-dir", state, "--json"});
        const Ran ran = Cusnap(args);
        EXPECT_EQ(ran.status, 0) << command << ": " << ran.out << ran.err;
        const auto doc = nlohmann::json::parse(ran.out, nullptr, /*allow_exceptions=*/false);
        if (ran.status != 0 || !doc.is_object()) return best;
        for (const auto& p : doc["phases"]) {
          const std::string name = p["name"].get<std::string>();
          const double ms = p["elapsed_ms"].get<double>();
          const auto it = best.find(name);
          best[name] = it == best.end() ? ms : std::min(it->second, ms);
        }
      }
    }
    CheckEveryByte();
    std::string line = "phase table: " + std::to_string(ranks) + " ranks x " +
                       std::to_string(allocations) + " allocations (" +
                       std::to_string(2 * ranks * allocations) + " views):";
    for (const auto& [name, ms] : best) {
      char cell[64];
      std::snprintf(cell, sizeof cell, " %s %.1f", name.c_str(), ms);
      line += cell;
    }
    char total[64];
    std::snprintf(total, sizeof total, " | topology %.1f ms", Topology(best));
    std::printf("%s%s\n", line.c_str(), total);
    std::fflush(stdout);
    RecordProperty("phases_" + std::to_string(ranks) + "x" + std::to_string(allocations), line + total);
    EndJob();
    return best;
  }

  static double Topology(const PhaseTimes& times) {
    double sum = 0;
    for (const auto& [name, ms] : times) sum += kTopologyPhases.contains(name) ? ms : 0;
    return sum;
  }
};

TEST_F(ScalePhaseCost, TopologyPhasesGrowNoFasterThanAllocations) {
  for (const int ranks : {2, 4}) {
    const PhaseTimes t = Measure(ranks, 8);
    ASSERT_FALSE(HasFailure());
    for (const auto& name : kTopologyPhases) EXPECT_TRUE(t.contains(name)) << "no phase " << name;
  }
  const PhaseTimes small = Measure(kScaleRanks, 8);
  ASSERT_FALSE(HasFailure());
  const PhaseTimes large = Measure(kScaleRanks, 64);
  ASSERT_FALSE(HasFailure());
  for (const auto& name : kTopologyPhases) {
    ASSERT_TRUE(small.contains(name) && large.contains(name)) << "no phase " << name;
  }
  constexpr double kAllocationRatio = 64.0 / 8.0;
  const double floor_ms = 5.0;  // below this, a phase's time is noise on a loaded machine
  EXPECT_LT(Topology(large), 2 * kAllocationRatio * std::max(Topology(small), floor_ms))
      << "topology phases at 8 ranks: " << Topology(small) << " ms with 8 allocations per rank, "
      << Topology(large) << " ms with 64";
}

}  // namespace
}  // namespace jobtest
