// Internal to the CLI: loading the driver CUSNAP_DRIVER chooses.
#pragma once

#include <memory>

#include "common/error.h"
#include "coordinator/coordinator.h"
#include "coordinator/native_driver.h"

namespace cusnap::cli {

/// The driver CUSNAP_DRIVER (auto|real|sim) names, the simulated one looked up next to
/// this binary (native_driver.h, SimulatedDriverDir). When "real" cannot be loaded the
/// error also says how to use the simulated driver. Wrapped to hold a checkpointed job
/// stopped unless CUSNAP_HOLD=run (coordinator/hold.h); a bad CUSNAP_HOLD is an error.
Result<std::unique_ptr<coord::CheckpointDriver>> LoadChosenDriver();

/// The exit status (exit_codes.h) of a coordinator command's outcome.
int ExitFor(coord::Outcome outcome);

}  // namespace cusnap::cli
