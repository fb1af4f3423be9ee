// PhaseNamed (tests/unit/coordinator_phases.h): a phase found by name, and a missing one
// failing the test with the names of the phases there are.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "coordinator/record/state_file.h"
#include "unit/coordinator_phases.h"

namespace cusnap::testing {
namespace {

coord::PhaseReport Phase(const std::string& name, uint64_t bytes = 0) {
  coord::PhaseReport phase;
  phase.name = name;
  phase.bytes = bytes;
  return phase;
}

TEST(PhaseNamed, FindsThePhaseWhereverItIs) {
  coord::CommandReport report;
  report.phases = {Phase("discover"), Phase("save", 4096)};
  EXPECT_EQ(PhaseNamed(report, "save").bytes, 4096u);
  const std::vector<coord::PhaseTiming> timings = {{"save", 1.5, 0}, {"release", 0.5, 0}};
  EXPECT_EQ(PhaseNamed(timings, "release").elapsed_ms, 0.5);
}

TEST(PhaseNamed, AMissingPhaseFailsNamingThePhasesThatRan) {
  coord::CommandReport report;
  report.phases = {Phase("discover"), Phase("inspect")};
  EXPECT_NONFATAL_FAILURE(EXPECT_EQ(PhaseNamed(report, "save").bytes, 0u),
                          "no phase 'save' in the report; its phases: discover, inspect");
  EXPECT_NONFATAL_FAILURE(PhaseNamed(coord::CommandReport{}, "save"),
                          "no phase 'save' in the report; its phases: none");
}

}  // namespace
}  // namespace cusnap::testing
