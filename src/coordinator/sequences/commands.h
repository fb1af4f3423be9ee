// The coordinator's two commands, each a fixed list of named phases run in a visible order
// (DESIGN.md, "Lifecycle"; one function per stage, as CRIU's cr-dump.c reads):
//
//   checkpoint: discover -> inspect -> validate -> quiesce -> save -> write_state -> commit ->
//               detach_multicast -> release -> lock -> checkpoint
//   restore:    read_state -> discover -> match -> restore -> unlock -> reallocate -> import ->
//               multicast_create -> multicast_import -> multicast_join -> multicast_bind ->
//               verify -> activate
//   recover:    discover -> read_state -> decide -> resume (roll back), or detach_multicast ->
//               release -> restore -> unlock -> reallocate -> ... -> activate (roll forward)
//
// Each arrow is a barrier across participants; the work inside a phase runs concurrently.
// A transaction: nothing destructive happens before every participant saved and the state
// file is durable (detach_multicast is the first destructive step). A failure earlier sends
// kResume to every quiesced participant and leaves the job running untouched (a state file
// already written is removed). The commit phase tells every shim the point of no return is
// passed (its lease no longer rolls it back). A failure from detach_multicast on rolls the
// job forward (Recover): it runs again, every byte intact. A restore that fails leaves each
// shim where it was: 'cusnap restore' or 'cusnap recover' again finishes it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/messages.h"
#include "coordinator/native/device_map.h"
#include "coordinator/native/native_driver.h"
#include "coordinator/participants/participant.h"
#include "coordinator/participants/phase_runner.h"
#include "coordinator/sequences/interrupt.h"

namespace cusnap::coord {

/// Phases a full run prints (the CLI's progress bar counts them), counted from each
/// command's stage list (checkpoint.cc, restore.cc; PhaseLineCount, sequence.h):
/// write_carriers and read_carriers print only with images (dump.h counts them).
extern const size_t kCheckpointPhaseCount;
extern const size_t kRestorePhaseCount;

/// How a command ended; the CLI maps each to its exit status (see src/cli/exit_codes.h).
enum class Outcome {
  kOk,                 ///< full success
  kRefused,            ///< checkpoint refused before any change: the job runs untouched
  kFailedAfterChange,  ///< a destructive step failed: the job is not running normally
  kRestoreRefused,     ///< restore refused before any change (state file, participants)
  /// A checkpoint step after the point of no return failed, and the job was rolled forward
  /// (restored from what each shim holds): it runs as before, every byte intact.
  kRolledForward,
};

/// What a command did: its outcome, the error messages (each naming the process, the step
/// and the resource) and every phase that ran, in order.
struct CommandReport {
  Outcome outcome = Outcome::kOk;
  std::vector<std::string> errors;
  /// What the user must know that is not an error: participants that exited, memory whose
  /// creator died (allocation, creator pid, VA ranges left unmapped), the state file not
  /// used by a recovery, the recovery's direction.
  std::vector<std::string> notes;
  /// What the job lost for good (a subset of notes, said again at the end so that no final
  /// line claims every byte): each participant that exited with its own memory, each
  /// allocation a survivor imported from it, each multicast team it was a member of.
  std::vector<std::string> lost;
  std::vector<PhaseReport> phases;
  std::string state_file;  ///< path written or read
  /// `dump` and `restore --images-dir`: the images directory, which their "done" line names
  /// (the state file is one of its files); "" for the other commands.
  std::string images_dir;
  /// An Interrupt stopped the command at a phase boundary before its first destructive step
  /// (what it had done was undone: outcome kRefused or kRestoreRefused, unless undoing failed).
  bool interrupted = false;
  /// write_carriers (`cusnap dump`): every carrier part file written, with the digest of each
  /// chunk as its shim wrote it (the images manifest records them).
  std::vector<proto::CarrierFile> carrier_files;
  /// After kFailedAfterChange: the command that finishes the job, when it is not `recover`
  /// or `restore` with the same state directory (a dump whose job is only on disk now).
  std::string finish_with;
  /// `restore --images-dir`: the root of the tree CRIU brought back, as this process's PID
  /// namespace numbers it; 0 for the other commands.
  int restored_root = 0;
};

struct CheckpointOptions {
  std::string state_dir;
  unsigned lock_timeout_ms = 0;  ///< CUcheckpointLockArgs.timeoutMs; 0 = wait forever
  /// How the user named the job ("--pid 4120", "--all"), for the restore command a refusal
  /// suggests; empty: "--pid <the participant's pid>".
  std::string target;
  /// The lease every lifecycle request carries, renewed while the command runs (lease.h);
  /// 0: none (a killed command leaves the job held until 'cusnap recover').
  uint64_t lease_ms = 0;
  /// How long each shim's quiesce waits for work in flight (ms; 0: the shim's default).
  uint64_t drain_ms = 0;
  /// `cusnap dump`: the root of the tree CRIU will write into state_dir (the images
  /// directory), whose disk space validate checks for the images too (resources.h); 0 for a
  /// checkpoint in place.
  int images_root = 0;
};

struct RestoreOptions {
  std::string state_dir;
  std::vector<DevicePair> device_map;  ///< empty: restore on the same devices
  /// The lease every lifecycle request carries, renewed from discovery on (lease.h); a
  /// process the restore continued from the hold stops itself again once it runs out with
  /// the restore gone (shim/lifecycle/lifecycle.h). 0: none.
  uint64_t lease_ms = 0;
};

/// Suspends the job: every phase of the checkpoint list above. Returns kRefused (job
/// running untouched) for a failure before detach_multicast, or a failed detach after
/// which every participant resumed. A later failure rolls the job forward (Recover):
/// kRolledForward when it runs again, kFailedAfterChange when the roll forward failed too
/// (each shim keeps its state for 'cusnap recover'). `interrupt` (optional) stops it at a
/// phase boundary before detach_multicast, every participant resumed (kRefused,
/// report.interrupted); from detach_multicast on it finishes.
CommandReport Checkpoint(const CheckpointOptions& options, const Discoverer& discover,
                         CheckpointDriver& driver, PhaseObserver& observer,
                         Interrupt* interrupt = nullptr);

/// Resumes a job checkpointed into options.state_dir. Returns kRestoreRefused (nothing
/// changed) when the state file is missing or corrupt, the participants differ from the
/// recorded ones (pid reuse detected by start time) or the device map is bad;
/// kFailedAfterChange when a step after the native restore began fails (each shim keeps its
/// state: restore or recover again goes on). A job left half way by a command, or one whose
/// checkpointed participant exited, is recovered instead (Recover, notes saying so). `interrupt`
/// (optional) stops it at a phase boundary before the native restore (kRestoreRefused,
/// report.interrupted: the job stays checkpointed); from the native restore on it finishes.
CommandReport Restore(const RestoreOptions& options, const Discoverer& discover,
                      CheckpointDriver& driver, PhaseObserver& observer,
                      Interrupt* interrupt = nullptr);

struct RecoverOptions {
  /// The checkpoint's state directory: when its state file is this checkpoint's, a roll
  /// forward is verified against it; when it is missing or another checkpoint's, the roll
  /// forward uses what the shims hold and says so.
  std::string state_dir;
  /// Where a roll forward restores natively: the --device-map of the restore it finishes
  /// (empty: the GPUs the checkpoint recorded). Needs the state file; applied only to the
  /// participants the driver still holds checkpointed, checked against every participant's
  /// GPUs at reallocate; not used by a roll back.
  std::vector<DevicePair> device_map;
  /// As RestoreOptions::lease_ms.
  uint64_t lease_ms = 0;
};

/// Finishes whatever a checkpoint or restore left (a command killed, a step failed, a
/// participant dead): each participant's shim state and native state decide. Before the
/// point of no return (every shim ACTIVE, QUIESCED or SAVED, nothing locked) every survivor
/// is rolled back to ACTIVE (the state file of that checkpoint removed); after it, every
/// survivor is rolled forward (one still ACTIVE or QUIESCED quiesced and saved first, then
/// release where it was not, native restore and unlock, reallocate from its carrier,
/// import, multicast rebuild, verify, activate). kOk when every survivor is ACTIVE;
/// kFailedAfterChange when a step failed (each shim keeps its state: running it again goes
/// on from there); kRestoreRefused when discovery or a shim's INSPECT fails.
/// Participants that exited and memory that exited with them are named in report.notes.
CommandReport Recover(const RecoverOptions& options, const Discoverer& discover,
                      CheckpointDriver& driver, PhaseObserver& observer,
                      Interrupt* interrupt = nullptr);

/// Phases a full roll forward prints.
extern const size_t kRecoverPhaseCount;

}  // namespace cusnap::coord
