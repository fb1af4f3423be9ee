// The restore sequence (coordinator.h): one function per phase, run in order by Run().
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>

#include "common/ids.h"
#include "coordinator/images/carrier_files.h"
#include "coordinator/proc/processes.h"
#include "coordinator/record/records.h"
#include "common/text.h"
#include "coordinator/sequences/sequence.h"
#include "coordinator/record/state_file.h"

namespace cusnap::coord {
namespace {

class RestoreSequence : Sequence {
 public:
  RestoreSequence(const RestoreOptions& options, const Discoverer& discover,
                  CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt)
      : Sequence(discover, driver, observer, interrupt), options_(options) {
    lease_ms_ = options.lease_ms;
  }

  /// Runs kStages in order (below).
  CommandReport Run();

  /// The restore, stage by stage: read-only until match (a refusal, or an interrupt, changes
  /// nothing: the job stays checkpointed); from the native restore on, every failure is loud
  /// and final, and an interrupt no longer stops it. The device map goes to the
  /// native restore only: it keeps each process's ordinals and changes the GPU behind them
  /// (DRIVER-FACTS F7), so the shims rebuild on the ordinals they recorded. After
  /// multicast_bind every shim is RESTORED and its application still waits: verify compares
  /// first, activate lets it go on.
  static const Stage<RestoreSequence> kStages[];

 private:
  Outcome Refused() { return Outcome::kRestoreRefused; }
  Outcome Failed() { return Outcome::kFailedAfterChange; }

  bool Match() {
    return CheckPhase("match", [&] { return MatchParticipants(); }) && !needs_recovery_;
  }

 public:
  /// Match found a job that is not checkpointed as a whole (a shim between phases, or a
  /// participant of the checkpoint that exited): Restore() recovers it instead.
  bool needs_recovery() const { return needs_recovery_; }

 private:
  /// True when the participants found now are a job that a checkpoint or restore left half
  /// way (some shim neither ACTIVE nor RELEASED), or when a participant the state file
  /// records exited (its survivors are restored without it). Participants the state file
  /// does not record are refused by match, as is a mix of ACTIVE and RELEASED ones.
  bool NeedsRecovery() const {
    std::map<int, const ParticipantState*> recorded;
    for (const auto& p : state_.participants) recorded[p.pid] = &p;
    bool between = false;
    for (const auto& id : identities_) {
      if (!recorded.count(id.pid)) return false;
      between = between || (id.state != proto::ShimState::kReleased &&
                            id.state != proto::ShimState::kActive);
    }
    if (between) return true;
    for (const auto& id : identities_) {
      if (id.state != proto::ShimState::kReleased) return false;
      recorded.erase(id.pid);
    }
    for (const auto& [pid, p] : recorded) {
      if (!AliveHere(pid, p->start_time)) return true;  // exited (a zombie too)
    }
    return false;
  }

  /// reallocate: the creators' fresh allocations, their saved bytes copied back (streamed
  /// from the carrier files read_carriers found, each chunk checked as it is read).
  bool ReallocateAll() { return LifecyclePhase(proto::Op::kReallocate, SavedBytes()); }
  /// read_carriers: when the state directory holds carrier files (a dump wrote them), every
  /// participant finds its own there, each file opened and of its size (one that kept its
  /// carrier in memory has nothing to find); reallocate refuses until then, and reads them.
  bool ReadCarriersAll() {
    if (!HasCarrierFiles(options_.state_dir)) return true;
    const std::string dir = AbsoluteDir(options_.state_dir);
    return CarrierFilePhase(proto::Op::kReadCarrier,
                            [&](size_t) -> std::optional<std::string> { return dir; }, SavedBytes());
  }
  /// A multicast rebuild step (noted when the checkpoint recorded no multicast object).
  template <proto::Op op>
  bool MulticastStage() {
    return LifecyclePhase(op, 0, MulticastNote());
  }
  /// multicast_bind, the last rebuild step: every shim is then RESTORED, its application
  /// still waiting for activate.
  bool BindAll() {
    return LifecyclePhase(proto::Op::kMulticastBind, 0, MulticastNote(),
                          proto::ShimState::kRestored);
  }
  /// activate: every shim ACTIVE again, its application calls proceed.
  bool ActivateAll() {
    return LifecyclePhase(proto::Op::kActivate, 0, "", proto::ShimState::kActive);
  }

  /// read_state: the state file, validated (missing or corrupt refuses).
  bool ReadState() {
    return LocalPhase("read_state", [&]() -> Result<uint64_t> {
      auto state = ReadStateFile(options_.state_dir);
      if (!state && state.error().code == -1) {
        // A file there that does not describe a checkpoint (corrupt, changed, another
        // format): the processes still hold what they need.
        return Error{-1, state.error().message + "; if the job was checkpointed with it, 'cusnap "
                             "recover' brings it back from what its processes hold, without "
                             "the file"};
      }
      if (!state) return state.error();
      state_ = std::move(*state);
      return uint64_t{0};
    });
  }

  /// match: the participants found now must be exactly the recorded ones, the same
  /// processes (start times match: a reused pid is refused), each with its memory released
  /// by the checkpoint the state file records (the checkpoint ids match);
  /// and the device map must resolve. Returns every problem.
  std::vector<std::string> MatchParticipants() {
    std::vector<std::string> problems;
    if (NeedsRecovery()) {
      needs_recovery_ = true;
      return problems;
    }
    std::map<int, const ParticipantState*> recorded;
    for (const auto& p : state_.participants) recorded[p.pid] = &p;
    expected_.assign(participants_.size(), nullptr);
    for (size_t i = 0; i < participants_.size(); ++i) {
      const Identity& id = identities_[i];
      const auto it = recorded.find(id.pid);
      if (it == recorded.end()) {
        problems.push_back(ProcessText(id.pid) +
                           " is a participant now but is not in the checkpoint " +
                           report_.state_file);
        continue;
      }
      if (it->second->start_time != id.start_time) {
        problems.push_back(ProcessText(id.pid) + " is not the process that was " +
                           "checkpointed: it started at tick " + std::to_string(id.start_time) +
                           ", the checkpoint's " + ProcessText(id.pid) +
                           " started at tick " + std::to_string(it->second->start_time) +
                           " (pid reused)");
      } else if (id.state != proto::ShimState::kReleased) {
        problems.push_back(ProcessText(id.pid) + ": its cusnap shim is " +
                           Lowercase(proto::ShimStateName(id.state)) + ", not released" +
                           (id.failure.empty() ? "" : " (" + id.failure + ")") +
                           "; there is nothing to restore");
      } else if (id.checkpoint_id != state_.checkpoint_id) {
        problems.push_back(ProcessText(id.pid) + ": its cusnap shim holds checkpoint " +
                           (id.checkpoint_id.empty() ? "(none)" : id.checkpoint_id) + ", but " +
                           report_.state_file + " is checkpoint " + state_.checkpoint_id +
                           " (the state file was replaced, e.g. by an older one); restore "
                           "needs the state file of checkpoint " + id.checkpoint_id);
      }
      expected_[i] = it->second;
      recorded.erase(it);
    }
    for (const auto& [pid, p] : recorded) {
      problems.push_back(ProcessText(pid) + " of the checkpoint is not a " +
                         "participant now (exited, or outside the given process tree)");
    }
    if (problems.empty() && !options_.device_map.empty()) {
      UseDeviceMap(options_.device_map, state_, problems);
    }
    return problems;
  }

  /// restore: the native restore with the device map (Sequence::NativeRestorePhase).
  bool NativeRestoreAll() { return NativeRestorePhase(gpu_pairs_); }

  /// unlock: Sequence::NativeUnlockPhase.
  bool NativeUnlockAll() { return NativeUnlockPhase(); }

  /// kNoMulticastNote when the checkpoint recorded no multicast object (the multicast
  /// phases then rebuild nothing; they still run, every shim steps through them).
  std::string MulticastNote() const {
    for (const auto& p : state_.participants) {
      if (HasMulticast(p.records)) return "";
    }
    return kNoMulticastNote;
  }

  /// The bytes the checkpoint saved (what reallocate copies back), for the progress bar.
  uint64_t SavedBytes() const {
    uint64_t total = 0;
    for (const auto& p : state_.participants) total += p.saved_bytes;
    return total;
  }

  /// verify: a fresh INSPECT must reproduce the state file record for record (the state
  /// file is the restore oracle: same ids, VAs, sizes, access, handle counts).
  bool VerifyAll() {
    std::vector<ParticipantView> fresh(participants_.size());
    return Phase("verify", [&](size_t i) -> Result<uint64_t> {
      if (auto s = InspectInto(fresh, i); !s) return s.error();
      return CompareWithRecord(participants_[i]->pid(), expected_[i]->records, fresh[i].records);
    });
  }

  const RestoreOptions& options_;
  StateFile state_;
  std::vector<const ParticipantState*> expected_;  ///< per participant index
  bool needs_recovery_ = false;
};

constexpr Stage<RestoreSequence> RestoreSequence::kStages[] = {
    {&RestoreSequence::ReadState, &RestoreSequence::Refused, false},
    {&RestoreSequence::DiscoverPhase, &RestoreSequence::Refused, false},
    {&RestoreSequence::Match, &RestoreSequence::Refused, false},
    {&RestoreSequence::NativeRestoreAll, &RestoreSequence::Failed, true},
    {&RestoreSequence::NativeUnlockAll, &RestoreSequence::Failed, true},
    {&RestoreSequence::ReadCarriersAll, &RestoreSequence::Failed, true, PhaseLines::kWithImages},
    {&RestoreSequence::ReallocateAll, &RestoreSequence::Failed, true},
    {&RestoreSequence::LifecycleStage<proto::Op::kImport>, &RestoreSequence::Failed, true},
    {&RestoreSequence::MulticastStage<proto::Op::kMulticastCreate>, &RestoreSequence::Failed, true},
    {&RestoreSequence::MulticastStage<proto::Op::kMulticastImport>, &RestoreSequence::Failed, true},
    {&RestoreSequence::MulticastStage<proto::Op::kMulticastJoin>, &RestoreSequence::Failed, true},
    {&RestoreSequence::BindAll, &RestoreSequence::Failed, true},
    {&RestoreSequence::VerifyAll, &RestoreSequence::Failed, true},
    {&RestoreSequence::ActivateAll, &RestoreSequence::Failed, true},
};

CommandReport RestoreSequence::Run() {
  report_.state_file = StateFilePath(options_.state_dir);
  return Finish(RunStages(*this, kStages));
}

}  // namespace

const size_t kRestorePhaseCount = PhaseLineCount(RestoreSequence::kStages, false);
const size_t kRestoreWithImagesPhaseCount = PhaseLineCount(RestoreSequence::kStages, true);

CommandReport Restore(const RestoreOptions& options, const Discoverer& discover,
                      CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt) {
  RestoreSequence sequence(options, discover, driver, observer, interrupt);
  CommandReport report = sequence.Run();
  if (!sequence.needs_recovery()) return report;
  report.notes.push_back("the job is not checkpointed as a whole (a command stopped half way, "
                         "or a participant exited): recovering it" +
                         std::string(options.device_map.empty()
                                         ? ""
                                         : ", with the device map where a native restore "
                                           "is still due"));
  observer.Remark(report.notes.back() + " (the phases of 'cusnap recover' follow)");
  const RecoverOptions recover{options.state_dir, options.device_map, options.lease_ms};
  MergeInto(report, Recover(recover, discover, driver, observer, interrupt));
  return report;
}

}  // namespace cusnap::coord
