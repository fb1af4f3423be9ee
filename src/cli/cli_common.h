// Internal to the CLI: loading the driver CUSNAP_DRIVER chooses.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "cli/commands.h"
#include "coordinator/coordinator.h"
#include "coordinator/native/native_driver.h"

namespace cusnap::cli {

/// The driver CUSNAP_DRIVER (auto|real|sim) names, the simulated one looked up next to
/// this binary (native_driver.h, SimulatedDriverDir). When "real" cannot be loaded the
/// error also says how to use the simulated driver. Wrapped to hold a checkpointed job
/// stopped unless CUSNAP_HOLD=run (coordinator/participants/hold.h); a bad CUSNAP_HOLD is an error.
Result<std::unique_ptr<coord::CheckpointDriver>> LoadChosenDriver();

/// Maps the driver libraries CUSNAP_DRIVER chooses (coord::KeepDriverLibrariesMapped) before
/// this process joins a job's mount namespace: LoadChosenDriver there loads this machine's.
void KeepChosenDriverMapped();

/// The exit status (exit_codes.h) of a coordinator command's outcome.
int ExitFor(coord::Outcome outcome);

/// A command that ends before any participant was contacted: "cusnap <command>: <problem>;
/// nothing was changed" on stderr (and, with `json`, as the JSON document: command,
/// exit_code, errors); returns `rc`.
int EndUntouched(const char* command, bool json, const std::string& problem, int rc);

/// A refusal before anything was changed: `problem`, then "refused; nothing was changed", on
/// stderr as two lines (and, with `json`, both as the document's errors); returns `rc`.
int EndRefused(const char* command, bool json, const std::string& problem, int rc);

/// Runs one coordinator command for the CLI.
using SequenceRun = std::function<coord::CommandReport(
    const coord::Discoverer&, coord::CheckpointDriver&, coord::PhaseObserver&, coord::Interrupt&)>;

/// What checkpoint, restore, recover, dump and restore --images-dir share: checks `target`
/// (a bad one ends with `refused`), loads the driver, runs `run` with phase lines (or one
/// JSON document), prints the errors and the job's state, and returns the exit status.
int Drive(const char* command, const Target& target, bool json, size_t phases,
          int refused, const SequenceRun& run);

/// Parses `--device-map` text of `command` ("restore", "recover") into `out` (empty text:
/// none); false after saying on stderr why it cannot be read (a usage error).
bool ParseDeviceMapArg(const char* command, const std::string& text,
                       std::vector<coord::DevicePair>& out);

/// Continues a held (stopped) job's processes before a restore (coordinator/participants/hold.h); what
/// cannot be continued is said on stderr. Returns the pids it continued.
std::vector<int> ContinueHeld(const char* command, const Target& target);

/// After `command` ended with exit status `rc`: unless it restored (0) or changed the job
/// (4), stops the processes ContinueHeld continued again (coordinator/participants/hold.h HoldAgain), so
/// a refused or interrupted restore leaves the job held as it found it. Returns `rc`.
int HoldAgainUnlessChanged(const char* command, const std::vector<int>& continued, int rc);

}  // namespace cusnap::cli
