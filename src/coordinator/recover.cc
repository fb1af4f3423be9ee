// The recover sequence (coordinator.h): finishes what an interrupted or failed checkpoint or
// restore left, from whatever phase each participant is in (DESIGN.md, "Transactions").
#include <sys/stat.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "common/ids.h"
#include "common/text.h"
#include "coordinator/carrier_files.h"
#include "coordinator/proc.h"
#include "coordinator/records.h"
#include "coordinator/sequence.h"
#include "coordinator/state_file.h"

namespace cusnap::coord {
namespace {

using proto::ShimState;

/// Past the checkpoint's point of no return: the shim took something apart (or is being
/// put back together) and only rolling forward finishes.
bool PastPointOfNoReturn(ShimState s) {
  return s != ShimState::kActive && s != ShimState::kQuiesced && s != ShimState::kSaved;
}

class RecoverSequence : Sequence {
 public:
  RecoverSequence(const RecoverOptions& options, const Discoverer& discover,
                  CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt)
      : Sequence(discover, driver, observer, interrupt), options_(options) {
    lease_ms_ = options.lease_ms;
  }

  /// Runs kStages in order (below).
  CommandReport Run();

  /// Read-only until decide; then either the roll back (resume) or the roll forward, each
  /// phase sending its step only to the participants in the phase it starts from (those
  /// already past it skip it), so running recover again goes on where it stopped.
  static const Stage<RecoverSequence> kStages[];

 private:
  Outcome Refused() { return Outcome::kRestoreRefused; }
  Outcome Failed() {
    report_.errors.push_back("the recovery stopped; each process keeps its state: run 'cusnap "
                             "recover' again to go on from there");
    return Outcome::kFailedAfterChange;
  }

  /// read_state: the state file, when there is one that is this checkpoint's (the oracle of
  /// verify); otherwise the roll forward goes on from what the shims hold, and says so.
  bool ReadState() {
    return LocalPhase("read_state", [&]() -> Result<uint64_t> {
      if (options_.state_dir.empty()) return uint64_t{0};
      auto state = ReadStateFile(options_.state_dir);
      if (!state) {
        Note("no usable state file (" + state.error().message + "): recovering from what "
             "each process's shim holds, without verifying against a state file");
        report_.state_file.clear();  // not used: the CLI's "done" names none
        struct stat st {};
        unusable_state_ = ::lstat(StateFilePath(options_.state_dir).c_str(), &st) == 0;
        return uint64_t{0};
      }
      std::set<std::string> held;
      for (const auto& id : identities_) {
        if (!id.checkpoint_id.empty()) held.insert(id.checkpoint_id);
      }
      if (!held.empty() && (held.size() > 1 || *held.begin() != state->checkpoint_id)) {
        Note(report_.state_file + " is checkpoint " + state->checkpoint_id + ", but the shims "
             "hold checkpoint " + *held.begin() + ": recovering from what each shim holds, "
             "without verifying against the state file");
        report_.state_file.clear();  // not used: "done" must not name it
        return uint64_t{0};
      }
      state_ = std::move(*state);
      have_state_ = true;
      held_by_shims_ = !held.empty();
      return uint64_t{0};
    });
  }

  /// decide: which way every participant goes, from its shim's state and the driver's: any
  /// shim past SAVED, or any process the driver holds locked or checkpointed, means forward.
  /// Names the participants of the checkpoint that exited, and the memory they took along.
  bool Decide() {
    return CheckPhase("decide", [&]() -> std::vector<std::string> {
      std::vector<std::string> problems;
      now_.assign(participants_.size(), ShimState::kActive);
      views_.assign(participants_.size(), ParticipantView{});
      for (size_t i = 0; i < participants_.size(); ++i) {
        now_[i] = identities_[i].state;
        if (PastPointOfNoReturn(now_[i])) forward_ = true;
        if (native_[i]) {
          auto native = driver_.GetState(participants_[i]->pid());
          if (native && *native != CU_PROCESS_STATE_RUNNING) forward_ = true;
        }
        if (auto s = InspectInto(views_, i); !s) problems.push_back(s.error().message);
      }
      // Rolling forward, a participant that is ACTIVE or QUIESCED (it resumed when another
      // could not, e.g. after a detach that took a team apart) goes through the whole cycle
      // too: quiesced and saved now, so that every participant is rebuilt from the records.
      recycled_.assign(participants_.size(), 0);
      for (size_t i = 0; i < participants_.size() && forward_; ++i) {
        recycled_[i] = now_[i] == ShimState::kActive || now_[i] == ShimState::kQuiesced;
      }
      recycle_id_ = NewCheckpointId();
      for (const auto& id : identities_) {
        if (!id.checkpoint_id.empty()) recycle_id_ = id.checkpoint_id;
      }
      NameExited();
      if (!options_.device_map.empty()) DecideDeviceMap(problems);
      if (std::all_of(now_.begin(), now_.end(), [](ShimState s) { return s == ShimState::kActive; }) &&
          !forward_) {
        Note("every participant is active: nothing to recover");
        report_.state_file.clear();  // not used: the CLI's "done" names no state file
      } else {
        Note(forward_ ? "past the point of no return: rolling every participant forward"
                      : "before the point of no return: rolling every participant back");
      }
      return problems;
    });
  }

  /// decide, with --device-map: a roll forward restores natively onto the mapped GPUs
  /// (Sequence::UseDeviceMap, against the state file: refused without it); a roll back keeps
  /// the job where it is and says so.
  void DecideDeviceMap(std::vector<std::string>& problems) {
    if (!forward_) {
      Note("before the point of no return: the job rolls back on the GPUs it runs on; the "
           "device map is not used");
      return;
    }
    if (!have_state_) {
      problems.push_back("--device-map needs the checkpoint's state file, to know which GPUs "
                         "the job used: give its --state-dir");
      return;
    }
    UseDeviceMap(options_.device_map, state_, problems);
  }

  /// The participants of the checkpoint (state file) that are gone, and every allocation a
  /// survivor imported from a process that is gone, with the VA ranges left unmapped.
  void NameExited() {
    std::set<int> live;
    for (const auto& id : identities_) live.insert(id.pid);
    std::set<int> gone;
    if (have_state_) {
      for (const auto& p : state_.participants) {
        if (!live.count(p.pid) && !AliveHere(p.pid, p.start_time)) gone.insert(p.pid);
      }
    }
    std::vector<std::string> orphans;
    for (size_t i = 0; i < views_.size(); ++i) {
      std::map<uint64_t, std::string> ranges;  // allocation local id -> VA ranges
      std::map<uint64_t, proto::ObjectId> ids;
      for (const auto& r : views_[i].records) {
        if (r.kind != static_cast<uint32_t>(proto::RecordKind::kAllocation) &&
            r.kind != static_cast<uint32_t>(proto::RecordKind::kMapping)) {
          continue;
        }
        if (live.count(r.id.creator_pid) || AliveHere(r.id.creator_pid, r.id.creator_start)) {
          continue;
        }
        gone.insert(r.id.creator_pid);
        ids[r.id.local_id] = r.id;
        if (r.kind == static_cast<uint32_t>(proto::RecordKind::kMapping)) {
          auto& text = ranges[r.id.local_id];
          text += (text.empty() ? "" : ", ") + VaRangeText(r.address, r.size);
        }
      }
      for (const auto& [local, id] : ids) {
        orphans.push_back(DescribeObject(id) + ", created by " + ProcessText(id.creator_pid) +
                          " (exited), cannot come back: " + ProcessText(views_[i].pid) +
                          "'s mappings of it stay unmapped: " +
                          (ranges[local].empty() ? std::string("none") : ranges[local]));
      }
    }
    for (int pid : gone) {
      exited_.push_back(pid);
      Note(ProcessText(pid) + " of the job exited; its own memory went with it, the "
           "survivors are recovered without it");
    }
    for (const auto& o : orphans) Note(o);
    NameDroppedTeams(gone);
  }

  /// The multicast teams a member of which (creator, importer or binder) is in `gone`: the
  /// survivors do not rebuild them (dropped_, sent with every multicast rebuild step); each
  /// is named with its members and every survivor's multicast VA ranges left unmapped.
  void NameDroppedTeams(const std::set<int>& gone) {
    const auto is = [](const proto::Record& r, proto::RecordKind kind) {
      return r.kind == static_cast<uint32_t>(kind);
    };
    std::map<std::string, proto::ObjectId> teams;  // by DescribeObject text
    std::map<std::string, std::set<int>> members;
    const auto collect = [&](int pid, const std::vector<proto::Record>& records) {
      for (const auto& r : records) {
        if (!is(r, proto::RecordKind::kMulticast)) continue;
        teams[DescribeObject(r.id, "multicast object")] = r.id;
        members[DescribeObject(r.id, "multicast object")].insert(pid);
        members[DescribeObject(r.id, "multicast object")].insert(r.id.creator_pid);
      }
    };
    if (have_state_) {
      for (const auto& p : state_.participants) collect(p.pid, p.records);
    }
    for (const auto& v : views_) collect(v.pid, v.records);
    for (const auto& [name, id] : teams) {
      std::string dead;
      for (int pid : members[name]) {
        if (gone.count(pid)) dead += (dead.empty() ? "" : ", ") + ProcessText(pid);
      }
      if (dead.empty()) continue;
      dropped_.push_back(id);
      std::string survivors;
      for (const auto& v : views_) {
        if (!members[name].count(v.pid)) continue;
        std::string ranges;
        for (const auto& r : v.records) {
          if (!is(r, proto::RecordKind::kMulticastMapping) || !(r.id == id)) continue;
          ranges += (ranges.empty() ? "" : ", ") + VaRangeText(r.address, r.size);
        }
        survivors += "; " + ProcessText(v.pid) + "'s multicast mappings of it stay unmapped: " +
                     (ranges.empty() ? std::string("none") : ranges);
      }
      Note(name + ", created by " + ProcessText(id.creator_pid) + ": its team "
           "lost " + dead + " (exited), it is not rebuilt" + survivors);
    }
  }

  /// resume (roll back): every QUIESCED or SAVED participant back to ACTIVE; the state file
  /// of the checkpoint that did not happen is removed.
  bool RollBack() {
    if (forward_) return true;
    bool any = false;
    for (ShimState s : now_) any = any || s != ShimState::kActive;
    if (!any) return true;
    const bool ok = Phase("resume", [&](size_t i) -> Result<uint64_t> {
      if (now_[i] == ShimState::kActive) return uint64_t{0};
      auto step = Ask(i, proto::Op::kResume);
      if (!step) return step.error();
      now_[i] = step->state;
      return uint64_t{0};
    });
    // Only the state file of the checkpoint the shims held describes what did not happen.
    if (ok && have_state_ && held_by_shims_) {
      if (auto s = RemoveStateFile(options_.state_dir); !s) {
        Note("the checkpoint was rolled back, but its state file stays: " + s.error().message);
      }
    }
    return ok;
  }

  /// One roll-forward step: `op` to every participant whose shim is in `from` (the others
  /// are past it, or not part of the roll forward).
  template <proto::Op op, ShimState from>
  bool Forward() {
    if (!forward_) return true;
    const bool due = std::any_of(now_.begin(), now_.end(), [](ShimState s) { return s == from; });
    if (!due) return true;
    // The multicast phases say so when no shim holds a multicast object, as the restore's do.
    const bool multicast = op == proto::Op::kMulticastCreate || op == proto::Op::kMulticastImport ||
                           op == proto::Op::kMulticastJoin || op == proto::Op::kMulticastBind;
    const bool any_multicast = std::any_of(views_.begin(), views_.end(), [](const ParticipantView& v) {
      return HasMulticast(v.records);
    });
    const std::string note = multicast && !any_multicast ? kNoMulticastNote : "";
    return Phase(Lowercase(proto::OpName(op)), [&](size_t i) -> Result<uint64_t> {
      if (now_[i] != from || dead_[i]) return uint64_t{0};
      proto::StepRequest request{op, 0, op == proto::Op::kSave ? recycle_id_ : ""};
      request.dropped_multicast = dropped_;
      auto step = Ask(i, request);
      if (!step) return step.error();
      now_[i] = step->state;
      NoteCopy(step->copy_ns, step->zero_bytes);
      return step->bytes;
    }, 0, note);
  }

  /// read_carriers: as the restore's (restore.cc), for every participant still RELEASED (a
  /// dump stopped after write_carriers left its carrier in files): from the state directory
  /// when it holds carrier files, else from where each shim wrote them (a shim whose carrier
  /// is in memory has nothing to read).
  bool ReadCarriersAll() {
    if (!forward_ ||
        std::none_of(now_.begin(), now_.end(), [](ShimState s) { return s == ShimState::kReleased; })) {
      return true;
    }
    const std::string dir = !options_.state_dir.empty() && HasCarrierFiles(options_.state_dir)
                                ? AbsoluteDir(options_.state_dir)
                                : "";
    return CarrierFilePhase(proto::Op::kReadCarrier, [&](size_t i) -> std::optional<std::string> {
      if (now_[i] != ShimState::kReleased || dead_[i]) return std::nullopt;
      return dir;
    });
  }

  bool NativeRestoreAll() { return !forward_ || NativeRestorePhase(gpu_pairs_); }
  bool NativeUnlockAll() { return !forward_ || NativeUnlockPhase(); }

  /// verify: against the state file when it is this checkpoint's (memory of exited creators
  /// left out); skipped otherwise (said by read_state).
  bool VerifyAll() {
    if (!forward_ || !have_state_) return true;
    std::map<int, const ParticipantState*> recorded;
    for (const auto& p : state_.participants) recorded[p.pid] = &p;
    std::vector<ParticipantView> fresh(participants_.size());
    return Phase("verify", [&](size_t i) -> Result<uint64_t> {
      // A participant quiesced by this recovery is rebuilt from its own fresh records.
      if (now_[i] != ShimState::kRestored || recycled_[i]) return uint64_t{0};
      const auto it = recorded.find(participants_[i]->pid());
      if (it == recorded.end()) return uint64_t{0};
      if (auto s = InspectInto(fresh, i); !s) return s.error();
      return CompareWithRecord(participants_[i]->pid(), it->second->records, fresh[i].records,
                               exited_, dropped_);
    });
  }

  bool ActivateAll() { return Forward<proto::Op::kActivate, ShimState::kRestored>(); }

  void Note(const std::string& text) { report_.notes.push_back(text); }

  /// After a recovery that did without an unusable state file: that file is set aside, so
  /// that the next checkpoint into the directory is not refused for it (state_guard.h).
  void SetAsideUnusableStateFile() {
    if (!unusable_state_) return;
    auto aside = SetAsideStateFile(options_.state_dir);
    Note(aside ? "the unusable state file was moved to " + *aside +
                     " (kept for a look): the next checkpoint writes a new one"
               : "the unusable state file stays: " + aside.error().message +
                     "; move it away before the next checkpoint into " + options_.state_dir);
  }

  const RecoverOptions& options_;
  StateFile state_;
  bool have_state_ = false;
  bool held_by_shims_ = false;  // some shim holds the state file's checkpoint id
  bool unusable_state_ = false;  // a state file is there, but ReadStateFile refused it
  bool forward_ = false;
  std::vector<ShimState> now_;        // per participant: its shim's state as last reported
  std::vector<ParticipantView> views_;
  std::vector<int> exited_;           // pids of the job that exited
  std::vector<proto::ObjectId> dropped_;  // multicast objects whose team lost a member
  std::vector<char> recycled_;        // per participant: quiesced and saved by this recovery
  std::string recycle_id_;            // the checkpoint id their kSave carries
};

constexpr Stage<RecoverSequence> RecoverSequence::kStages[] = {
    {&RecoverSequence::DiscoverPhase, &RecoverSequence::Refused, false},
    {&RecoverSequence::ReadState, &RecoverSequence::Refused, false},
    {&RecoverSequence::Decide, &RecoverSequence::Refused, false},
    {&RecoverSequence::RollBack, &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kQuiesce, ShimState::kActive>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kSave, ShimState::kQuiesced>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kDetachMulticast, ShimState::kSaved>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kRelease, ShimState::kMulticastDetached>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::NativeRestoreAll, &RecoverSequence::Failed, true},
    {&RecoverSequence::NativeUnlockAll, &RecoverSequence::Failed, true},
    {&RecoverSequence::ReadCarriersAll, &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kReallocate, ShimState::kReleased>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kImport, ShimState::kReallocated>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kMulticastCreate, ShimState::kImported>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kMulticastImport, ShimState::kMulticastCreated>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kMulticastJoin, ShimState::kMulticastImported>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::Forward<proto::Op::kMulticastBind, ShimState::kMulticastJoined>,
     &RecoverSequence::Failed, true},
    {&RecoverSequence::VerifyAll, &RecoverSequence::Failed, true},
    {&RecoverSequence::ActivateAll, &RecoverSequence::Failed, true},
};

CommandReport RecoverSequence::Run() {
  report_.state_file = options_.state_dir.empty() ? "" : StateFilePath(options_.state_dir);
  const Outcome outcome = RunStages(*this, kStages);
  if (outcome == Outcome::kOk) SetAsideUnusableStateFile();
  return Finish(outcome);
}

}  // namespace

const size_t kRecoverPhaseCount = std::size(RecoverSequence::kStages);

CommandReport Recover(const RecoverOptions& options, const Discoverer& discover,
                      CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt) {
  return RecoverSequence(options, discover, driver, observer, interrupt).Run();
}

}  // namespace cusnap::coord
