// Internal to the coordinator: the state both command sequences share while they run (the
// participants, what they reported, the report being built), the helper that runs one
// named phase, records it and tells the observer, and the row type of each command's stage
// list (checkpoint.cc, restore.cc, recover.cc, dump.cc: the phase counts in commands.h and
// dump.h are counted from those lists, PhaseLineCount).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/participants/command_lock.h"
#include "coordinator/sequences/commands.h"
#include "coordinator/sequences/interrupt.h"
#include "common/endpoint_client.h"
#include "coordinator/participants/lease.h"
#include "coordinator/participants/native_watch.h"
#include "coordinator/record/state_file.h"
#include "coordinator/record/topology.h"

namespace cusnap::coord {

/// Appends `later` (a command run to finish `report`'s: a recovery) to `report`: its phases,
/// errors and notes; the outcome becomes `later`'s.
void MergeInto(CommandReport& report, CommandReport later);

/// How CommandReport::lost names a participant that exited: "<process>'s own memory (it
/// exited)".
std::string ExitedMemoryText(int pid);

/// The phase lines a stage prints in a full run (the CLI's progress bar counts them).
enum class PhaseLines {
  kOne,         ///< one line, in every run
  kWithImages,  ///< one line only when the command has images: a dump, an images restore
  kNested,      ///< the lines of the whole command the stage runs (a dump's checkpoint)
};

/// One stage of a command `Seq`: the member that runs it, the member that decides, when it
/// failed, how the command ends (after undoing what it can), whether the stage changes the
/// job for good (the first such stage is the command's point of no return: an Interrupt no
/// longer stops it there or after), and the phase lines it prints.
template <typename Seq>
struct Stage {
  bool (Seq::*run)();
  Outcome (Seq::*on_failure)();
  bool destructive;
  PhaseLines lines = PhaseLines::kOne;
};

/// The phase lines a full run of `stages` prints: one per kOne stage, one per kWithImages
/// stage when `with_images`, and `nested` (the nested command's count) per kNested stage.
template <typename Seq, size_t N>
constexpr size_t PhaseLineCount(const Stage<Seq> (&stages)[N], bool with_images,
                                size_t nested = 0) {
  size_t count = 0;
  for (const Stage<Seq>& stage : stages) {
    switch (stage.lines) {
      case PhaseLines::kOne: ++count; break;
      case PhaseLines::kWithImages: count += with_images ? 1 : 0; break;
      case PhaseLines::kNested: count += nested; break;
    }
  }
  return count;
}

/// The phase lines of a checkpoint and of a restore run inside a dump and an images restore
/// (write_carriers and read_carriers print there): dump.cc's nested stages.
extern const size_t kCheckpointWithImagesPhaseCount;
extern const size_t kRestoreWithImagesPhaseCount;

class Sequence {
 protected:
  /// `interrupt`: asked at every phase boundary (null: the command cannot be interrupted).
  Sequence(const Discoverer& discover, CheckpointDriver& driver, PhaseObserver& observer,
           Interrupt* interrupt)
      : discover_(discover),
        watched_(driver, ControlDir(), [&observer](const std::string& text) { observer.Remark(text); }),
        driver_(watched_),
        observer_(observer),
        interrupt_(interrupt) {}

  /// Runs `stages` in order on `seq` until one fails; the outcome its on_failure gives, or
  /// kOk. At each boundary before the first destructive stage an Interrupt that asked to stop
  /// ends the command: what the stages so far did is undone by the last one's on_failure
  /// (which undoes a failure of that stage, so also its success), and the report says so.
  template <typename Seq, size_t N>
  Outcome RunStages(Seq& seq, const Stage<Seq> (&stages)[N]) {
    for (size_t k = 0; k < N; ++k) {
      const Stage<Seq>& stage = stages[k];
      if (interrupt_ != nullptr &&
          (stage.destructive ? !interrupt_->Commit() : interrupt_->StopAsked())) {
        NoteInterrupted();
        return (seq.*stages[k == 0 ? 0 : k - 1].on_failure)();
      }
      if (!(seq.*stage.run)()) return (seq.*stage.on_failure)();
    }
    return Outcome::kOk;
  }

  /// Records in the report that the command stopped at a boundary because it was asked to.
  void NoteInterrupted();

  /// Sends lifecycle `request` to participant `index` with the command's lease (lease_ms_).
  /// A participant that exited since discovery is named as such (code ESRCH) and marked in
  /// dead_; other errors are Step's. `pass_fd` as Step's.
  Result<proto::StepReply> Ask(size_t index, proto::StepRequest request, int pass_fd = -1);
  /// Ask with only the op.
  Result<proto::StepReply> Ask(size_t index, proto::Op op) {
    return Ask(index, proto::StepRequest{op, 0, ""});
  }
  /// True when participant `index` is no longer the process discovery identified.
  bool Exited(size_t index) const;
  /// Starts renewing the lease of every participant (DiscoverPhase, once every participant
  /// was identified; lease_ms_ 0: none; a second call does nothing).
  void StartLease();
  /// Stops renewing it (the keeper's threads are joined).
  void StopLease() { lease_.reset(); }

  /// Runs `work` for every participant concurrently; false when any failed (errors are
  /// appended to the report). With `expected_bytes`, the observer hears BytesMoved as each
  /// participant finishes. `note` goes to PhaseReport::note; `idle_note` too, when the phase
  /// succeeded without moving a byte (a line that says why nothing moved, not "N participants").
  bool Phase(const std::string& name, const PhaseWork& work, uint64_t expected_bytes = 0,
             const std::string& note = "", const std::string& idle_note = "");
  /// Runs coordinator-local work as a phase (PhaseReport::coordinator_only).
  bool LocalPhase(const std::string& name, const std::function<Result<uint64_t>()>& work);
  /// What a check's line says instead of a participant count, filled by the check as it
  /// runs: what it looked at (note, e.g. "32 files") and the bytes it read (the line shows
  /// their GB/s).
  struct CheckSummary {
    std::string note;
    uint64_t bytes = 0;
  };
  /// Runs a coordinator-local check as a phase: every message it returns is one error
  /// (each rule broken is reported on its own); false when there is any. With `summary`,
  /// the line says it once the check returned (a check that looks at no participant).
  bool CheckPhase(const std::string& name, const std::function<std::vector<std::string>()>& check,
                  const CheckSummary* summary = nullptr);
  /// write_carriers (`cusnap dump`, kWriteCarrier) or read_carriers (kReadCarrier): asks
  /// each participant for which `path_of(index)` gives a path to have its carrier there
  /// (StepRequest::carrier_path: written by its save already, or now), or find it there for
  /// reallocate to read; nullopt leaves it out. Bytes are the carriers' (holes included).
  /// One participant's carrier step: `request` with `folder` (-1: none) passed along.
  Result<uint64_t> CarrierStep(size_t i, const proto::StepRequest& request, int folder);
  bool CarrierFilePhase(proto::Op op,
                        const std::function<std::optional<std::string>(size_t)>& path_of,
                        uint64_t expected_bytes = 0);
  /// Sends lifecycle `op` to every participant; the phase is named after the op and counts
  /// the bytes carrier replies report. `note` as for Phase. With `leaves`, a participant
  /// whose shim reports another state after the step fails it.
  bool LifecyclePhase(proto::Op op, uint64_t expected_bytes = 0, const std::string& note = "",
                      std::optional<proto::ShimState> leaves = std::nullopt);
  /// LifecyclePhase(op) as a stage.
  template <proto::Op op>
  bool LifecycleStage() {
    return LifecyclePhase(op);
  }

  /// discover: find the participants and identify each (start time checked against /proc,
  /// so a stale socket of a reused pid is not taken for the process), and decide which ones
  /// the native checkpoint API applies to (native_).
  bool DiscoverPhase();

  /// Fresh INSPECT of participant `index` into views[index] (records + identity).
  Status InspectInto(std::vector<ParticipantView>& views, size_t index);

  /// restore: cuCheckpointProcessRestore with `pairs` (the device map), for every
  /// participant the driver reports CHECKPOINTED (one left LOCKED or RUNNING by an
  /// interrupted checkpoint needs no native restore). Participants the driver does not know
  /// (native_) and those that exited are skipped.
  bool NativeRestorePhase(const std::vector<UuidPair>& pairs);
  /// A restore onto other GPUs (restore's and recover's --device-map): resolves `map` against
  /// the machine's GPUs and the GPUs `state` recorded (ResolveDeviceMap) into gpu_pairs_ (for
  /// NativeRestorePhase) and device_map_ (sent with kReallocate), and checks that each GPU the
  /// map moves memory onto has free at least the bytes of the device allocations reallocate
  /// creates there (a native restore onto a full GPU leaves the process stuck for good).
  /// Each rule broken is appended to `problems` as one refusal naming the GPU (and the bytes
  /// needed and free); a driver that cannot tell free memory skips the room check.
  void UseDeviceMap(const std::vector<DevicePair>& map, const StateFile& state,
                    std::vector<std::string>& problems);
  /// unlock: cuCheckpointProcessUnlock on every participant the driver reports LOCKED.
  bool NativeUnlockPhase();
  /// A native phase named `name`: `step(pid)` for every participant the driver knows, alive,
  /// that the driver reports in state `when`.
  bool NativeStepPhase(const std::string& name, CUprocessState when,
                       const std::function<Status(int pid)>& step);

  /// verify's comparison: `actual` (a fresh INSPECT) must hold exactly the `expected`
  /// records, order aside; records of allocations created by a process in `exited` are left
  /// out of both (they cannot come back), and so are the records of the multicast objects
  /// in `dropped` (their team lost a member). The error names up to three differences each way.
  static Result<uint64_t> CompareWithRecord(int pid, const std::vector<proto::Record>& expected,
                                            const std::vector<proto::Record>& actual,
                                            const std::vector<int>& exited = {},
                                            const std::vector<proto::ObjectId>& dropped = {});

  /// Tells the observer the phase ended and adds it (and its errors) to the report.
  bool Record(PhaseReport phase);

  /// A carrier reply's copy time: the phase being run reports the slowest one.
  void NoteCopy(uint64_t copy_ns, uint64_t zero_bytes = 0);

  /// Each participant that exited during the command, into report_.lost.
  void NameExitedDuringCommand();

  /// Whether `participant` is the process that its endpoint's identity `id` names: the same
  /// identity start time, or a process CRIU restored without cusnap, which is adopted
  /// (AdoptRestoredProcess) with a note. Error (-1) naming a stale endpoint otherwise.
  Status IsTheProcessItsEndpointNames(Participant& participant, const Identity& id);

  CommandReport Finish(Outcome outcome) {
    StopLease();
    NameExitedDuringCommand();
    report_.outcome = outcome;
    return std::move(report_);
  }

  const Discoverer& discover_;
  WatchedDriver watched_;     // the driver given, its native calls watched (native_watch.h)
  CheckpointDriver& driver_;  // watched_
  PhaseObserver& observer_;
  Interrupt* interrupt_;
  std::vector<std::unique_ptr<Participant>> participants_;
  /// Each participant's command lock (command_lock.h), held from discover to the end.
  std::vector<std::shared_ptr<CommandLock>> command_locks_;
  std::vector<Identity> identities_;
  /// Per participant: the driver knows the process (cuCheckpointProcessGetState succeeded
  /// during discovery), so native lock/checkpoint/restore/unlock apply to it. The shim has an
  /// endpoint in every process it is loaded into, CUDA or not (a launcher that forks the
  /// CUDA workers), and the driver answers CUDA_ERROR_INVALID_VALUE for those; lifecycle
  /// requests still go to every participant (a failed GetState is asked once more: the
  /// driver failing once is not a process without CUDA). char, not bool: written from
  /// several threads.
  std::vector<char> native_;
  CommandReport report_;
  std::mutex notes_mutex_;  // report_.notes from phases that run on several threads
  std::atomic<uint64_t> phase_copy_ns_{0};  // NoteCopy's maximum for the phase being run
  std::atomic<uint64_t> phase_zero_bytes_{0};  // NoteCopy's sum for the phase being run
  /// The lease every lifecycle request carries, in ms (0: none; lease.h).
  uint64_t lease_ms_ = 0;
  std::unique_ptr<LeaseKeeper> lease_;
  /// Per participant: it exited during the command (Ask found it gone). char: threads.
  std::vector<char> dead_;
  /// The device map of a restore onto other GPUs, for the native restore (UseDeviceMap).
  std::vector<UuidPair> gpu_pairs_;
  /// The device map of a restore onto other GPUs, sent with kReallocate
  /// (StepRequest::device_map); "" otherwise.
  std::string device_map_;
};

}  // namespace cusnap::coord
