// Long suspends (docs/LONG-SUSPEND.md): a checkpointed job is held with every process
// stopped. While a job is held, its threads that call CUDA wait (at the shim's gate, or in
// the driver once natively locked), but threads that never call CUDA run on, and some of
// them measure the others: PyTorch's NCCL heartbeat monitor aborts the process when the
// watchdog thread, waiting in cudaEventQuery, has not beaten for
// TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC. A stopped process runs no thread at all, so nothing in
// it can time out while it is held.
//
// The hold: once a participant's native checkpoint succeeded it gets SIGSTOP, and a marker
// <control dir>/<pid>.held (its start time) says that cusnap stopped it; `cusnap restore`
// continues every held process of its target before it contacts any endpoint (a stopped
// process's endpoint cannot answer), and the native restore continues it again if anything
// was missed (it needs the process running). A process stopped by anyone else is never
// continued by cusnap: only a marker naming the same process (pid and start time) does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol.h"
#include "coordinator/native/native_driver.h"

namespace cusnap::coord {

/// Whether a checkpointed job is stopped while held (env CUSNAP_HOLD).
enum class HoldMode {
  kStop,  ///< "stop" (default): SIGSTOP after the native checkpoint, SIGCONT at restore
  kRun,   ///< "run": processes stay runnable while checkpointed (their CUDA calls wait)
};

/// Parses CUSNAP_HOLD's value (common/settings.h): "" or "stop", "run". Error (code EINVAL)
/// names the value and the values taken.
Result<HoldMode> ParseHoldMode(const std::string& text);

/// The hold mode the environment chooses: ParseHoldMode of CUSNAP_HOLD (unset: kStop).
Result<HoldMode> HoldModeFromEnvironment();

/// Stops `pid` for the hold: writes the marker, sends SIGSTOP and waits (at most
/// `wait_ms`) until /proc says the process is stopped. Errors (code errno, or ETIMEDOUT)
/// name the pid; on any error the marker is removed and a SIGCONT undoes a SIGSTOP sent.
Status StopHeld(const std::string& control_dir, int pid, int wait_ms = 5000);

/// Continues `pid` if cusnap stopped it: when its marker names this very process (start
/// time), sends SIGCONT, removes the marker and waits (at most `wait_ms`) until it runs; a
/// marker of an exited process or a reused pid is stale and only removed. No marker: Ok,
/// nothing done. Errors (code errno or ETIMEDOUT) name the pid; when SIGCONT could not be
/// sent the marker stays.
Status ContinueHeld(const std::string& control_dir, int pid, int wait_ms = 5000);

/// Continues `pid`, a process a CRIU restore just brought back as it was dumped (stopped
/// by the hold, or stopped with no marker by a --leave-running dump): its marker, if any, is
/// renamed away before SIGCONT (so that the process's hold guard, shim/hold/hold_guard.h,
/// does not stop it again) and removed after, whatever start time or PID
/// namespace it records (it describes the dumped process, which this one replaces). A process
/// that is not stopped: nothing done. Errors (code errno) name the pid.
Status ContinueRestored(const std::string& control_dir, int pid);

/// True when `pid` has a marker naming it and is stopped now: held by cusnap.
bool IsHeld(const std::string& control_dir, int pid);

/// A held process as `cusnap status` shows it: the phase its shim stopped in, and a line
/// saying who stopped it, whether its memory is back on the GPU and what continues it.
struct HeldView {
  proto::ShimState state = proto::ShimState::kReleased;
  std::string text;
};

/// HeldView of `pid` when it is held (IsHeld); nullopt otherwise. The state is the phase its
/// marker names (HeldPhase: a shim that held itself) or RELEASED (a checkpoint's marker).
std::optional<HeldView> HeldStatus(const std::string& control_dir, int pid);

/// The phase the marker of a held `pid` names: a shim that held itself after its command
/// died (shim/lifecycle/lifecycle.h) writes it there; nullopt for the checkpoint's own
/// markers (the process is RELEASED) or no marker.
std::optional<proto::ShimState> HeldPhase(const std::string& control_dir, int pid);

/// True when `pid` is stopped and its marker (under either name, of this PID namespace) names
/// an earlier process with its pid: a process CRIU brought back as it was dumped, held, for a
/// `cusnap restore --images-dir` that did not finish (coordinator/images/restore_record.h). Such a
/// marker is not stale (StaleHoldMarkers): it says why the process is stopped.
bool RestoredUnfinished(const std::string& control_dir, int pid);

/// Why `pid`, stopped (state `state`, 'T' or 't') and not held (IsHeld), cannot answer, and
/// what to run: RestoredUnfinished names the images restore to run again, any other process
/// is StoppedText's (kill -CONT).
std::string StoppedProcessText(const std::string& control_dir, int pid, char state = 'T');

/// ContinueHeld on every process of `pid`'s tree (ProcessTree), or with `pid` <= 0 on every
/// process with a marker in `control_dir`. Returns one message per process that could not
/// be continued (empty: all done); `continued`, when given, gets the pids it continued.
std::vector<std::string> ContinueHeldJob(const std::string& control_dir, int pid,
                                         std::vector<int>* continued = nullptr);

/// The hold markers in `control_dir` (paths) whose process exited or whose pid was reused
/// (another start time): left by a job that ended while held. `cusnap status --prune`
/// removes them.
std::vector<std::string> StaleHoldMarkers(const std::string& control_dir);

/// StaleHoldMarkers of `control_dir` and StaleHoldMarkersOfJobDir of every job control
/// directory below it (JobControlDirs): what `cusnap status` lists and `--prune` removes.
std::vector<std::string> StaleHoldMarkersBelow(const std::string& control_dir);

/// The hold markers in `job_dir` (a job control directory, common/control_dir.h: its pids
/// are those of the job's own PID namespace) whose process is gone: no process here has the
/// marker's pid as its innermost pid in the PID namespace the marker records (a dumped job's
/// markers, once its namespace is gone). A marker without a namespace is never judged here.
std::vector<std::string> StaleHoldMarkersOfJobDir(const std::string& job_dir);

/// After a command that continued `pids` (ContinueHeldJob) and then changed nothing (a
/// refused restore or recover): StopHeld on each that still runs, so the job is held as it
/// was. Returns one message per process that could not be stopped again.
std::vector<std::string> HoldAgain(const std::string& control_dir, const std::vector<int>& pids);

/// A CheckpointDriver that holds: Checkpoint(pid) stops the process once the inner driver's
/// checkpoint succeeded (StopHeld), Restore(pid) continues it first (ContinueHeld).
/// Everything else goes to `inner` as it is. With HoldMode::kRun, `inner` is returned.
std::unique_ptr<CheckpointDriver> WithHold(std::unique_ptr<CheckpointDriver> inner,
                                           const std::string& control_dir, HoldMode mode);

}  // namespace cusnap::coord
