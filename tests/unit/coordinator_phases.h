// Phases of a command's report (or of a state file) looked up by name, not by position, so
// that a test keeps checking the phase it means when phases are added or reordered, and a
// missing phase fails with the names of those that ran.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "coordinator/coordinator.h"

namespace cusnap::testing {

/// The phase called `name` among `phases` (coord::PhaseReport, coord::PhaseTiming: anything
/// with a `name`). When there is none, fails the test naming the phases there are and
/// returns an empty phase (zero bytes, zero participants), so the caller's checks fail too
/// without reading out of bounds.
template <typename Phase>
const Phase& PhaseNamed(const std::vector<Phase>& phases, std::string_view name) {
  for (const Phase& phase : phases) {
    if (phase.name == name) return phase;
  }
  std::string seen;
  for (const Phase& phase : phases) seen += (seen.empty() ? "" : ", ") + phase.name;
  ADD_FAILURE() << "no phase '" << name << "' in the report; its phases: "
                << (seen.empty() ? "none" : seen);
  static const Phase kMissing{};
  return kMissing;
}

/// The phase called `name` in `report` (see above).
inline const coord::PhaseReport& PhaseNamed(const coord::CommandReport& report,
                                            std::string_view name) {
  return PhaseNamed(report.phases, name);
}

}  // namespace cusnap::testing
