// The checkpoint sequence (coordinator.h): one function per phase, run in order by Run().
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <thread>

#include "coordinator/images/carrier_files.h"
#include "coordinator/record/records.h"
#include "coordinator/participants/resources.h"
#include "common/text.h"
#include "common/unique_fd.h"
#include "coordinator/sequences/sequence.h"
#include "coordinator/record/state_file.h"
#include "coordinator/record/state_guard.h"

namespace cusnap::coord {
namespace {

// Quiesce attempts before a checkpoint with work in flight is refused, and the pause after
// the first failed one (ms; the n-th pause is n times longer).
constexpr int kQuiesceTries = 3;
constexpr int kQuiesceRetryMs = 200;

class CheckpointSequence : Sequence {
 public:
  CheckpointSequence(const CheckpointOptions& options, const Discoverer& discover,
                     CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt)
      : Sequence(discover, driver, observer, interrupt), options_(options) {
    lease_ms_ = options.lease_ms;
  }

  /// Runs kStages in order (below).
  CommandReport Run();

  /// The checkpoint, stage by stage, as a transaction: read-only until quiesce (a failure
  /// leaves the job untouched); quiesce makes application calls wait, save copies every
  /// creator's bytes to host memory and write_state makes the state file durable, none of
  /// them destroying anything (a failure resumes every participant: the job runs on as it
  /// was). Only then is anything taken apart: detach_multicast undoes its own work until it
  /// released a team, so on its failure each shim is asked to resume and says itself whether
  /// it still can. Destructive from release on: fail loudly, never pretend.
  static const Stage<CheckpointSequence> kStages[];

 private:
  Outcome Refused() {
    RemoveCreatedDirs();
    return Outcome::kRefused;
  }
  Outcome ResumeAndRefuse() {
    ResumeQuiesced();
    return Refused();
  }
  Outcome ResumeOrFail() { return ResumeQuiesced() ? Refused() : Outcome::kFailedAfterChange; }

  /// A refused checkpoint leaves no directory it created behind (those still empty:
  /// rmdir removes nothing else), deepest first.
  void RemoveCreatedDirs() {
    for (auto dir = created_dirs_.rbegin(); dir != created_dirs_.rend(); ++dir) ::rmdir(dir->c_str());
    created_dirs_.clear();
  }
  Outcome Failed() { return Outcome::kFailedAfterChange; }

  /// detach_multicast: every multicast team taken apart (nothing to do without one).
  bool DetachAll() { return LifecyclePhase(proto::Op::kDetachMulticast, 0, MulticastNote()); }

  /// inspect: every participant's sharing table.
  bool InspectAll() {
    views_.assign(participants_.size(), ParticipantView{});
    return Phase("inspect", [&](size_t i) -> Result<uint64_t> {
      const Identity& id = identities_[i];
      if (id.state != proto::ShimState::kActive) {
        return Error{-1, ProcessText(id.pid) + ": its cusnap shim is " +
                             Lowercase(proto::ShimStateName(id.state)) + ", not active" +
                             (id.failure.empty() ? "" : " (" + id.failure + ")") +
                             "; only a running job can be checkpointed" + RestoreHint(id)};
      }
      if (auto s = InspectInto(views_, i); !s) return s.error();
      return uint64_t{0};
    });
  }

  /// For a participant whose shim is not ACTIVE: what to run instead (recover for a state
  /// between phases; restore for RELEASED, the job being checkpointed already). The state
  /// directory is named when the one given holds this very process's
  /// checkpoint (pid and start time recorded there); the shim does not know where its
  /// checkpoint went, so otherwise the hint stays generic.
  std::string RestoreHint(const Identity& id) const {
    if (id.state != proto::ShimState::kReleased) {
      // Between phases: a command was killed or failed there.
      return "; a checkpoint or restore stopped half way: run 'cusnap recover " +
             (options_.target.empty() ? PidOption(id.pid) : options_.target) +
             "' to finish it";
    }
    std::string dir = "<the state directory of its checkpoint>";
    if (auto state = ReadStateFile(options_.state_dir); state) {
      for (const auto& p : state->participants) {
        if (p.pid == id.pid && p.start_time == id.start_time) dir = options_.state_dir;
      }
    }
    const std::string target =
        options_.target.empty() ? PidOption(id.pid) : options_.target;
    return "; it is checkpointed: run 'cusnap restore " + target + " --state-dir " + dir + "'";
  }

  /// validate: the global topology rules, a state directory we can write that holds no
  /// other job's checkpoint, and the resources the rest of the checkpoint and the restore
  /// need (every participant's descriptors and host memory, the state file's disk space):
  /// all checked now so that they refuse before anything changes.
  bool ValidateAll() {
    return CheckPhase("validate", [&]() -> std::vector<std::string> {
      if (auto problems = ValidateTopology(views_); !problems.empty()) return problems;
      std::vector<ProcessIdentity> job;
      for (const auto& v : views_) job.push_back(ProcessIdentity{v.pid, v.start_time});
      // A dump keeps its state file in the images directory: refusals name it so.
      const DirectoryRole role = options_.images_root > 0 ? kImagesDirectory : kStateDirectory;
      if (auto owner = CheckStateDirOwner(options_.state_dir, job, role); !owner) {
        return {owner.error().message};
      }
      if (auto dir = PrepareStateDir(options_.state_dir, &created_dirs_, role); !dir) {
        return {dir.error().message};
      }
      return CheckResourcesAll(participants_, views_, options_.state_dir, options_.images_root);
    });
  }

  /// quiesce: application calls to tracked entry points wait. The table is inspected again
  /// while quiesced (it cannot change any more) and validated again; those records are the
  /// ones the state file keeps. Draining is bounded (DESIGN.md, "Transactions"): when a shim
  /// answers CUDA_ERROR_NOT_READY (work still in flight at its deadline, e.g. a collective
  /// waiting for a peer held at its gate), every gate reopens, the work gets a moment to
  /// finish and the quiesce is tried again, kQuiesceTries times in all; then the checkpoint
  /// is refused naming each process with work in flight, the job running as before.
  bool QuiesceAll() {
    for (int attempt = 1;; ++attempt) {
      const size_t errors_before = report_.errors.size();
      std::vector<char> busy(participants_.size(), 0);
      const Quiesced result = QuiesceOnce(busy);
      if (result == Quiesced::kAll) return true;
      if (result == Quiesced::kFailed) return false;
      if (attempt == kQuiesceTries) {
        report_.errors.resize(errors_before);
        for (size_t i = 0; i < busy.size(); ++i) {
          if (!busy[i]) continue;
          report_.errors.push_back(
              ProcessText(participants_[i]->pid()) + ": device work still in flight after " +
              std::to_string(kQuiesceTries) + " quiesce attempts (" + busy_why_[i] +
              "); every gate was reopened");
        }
        return false;
      }
      // Reopen every gate (nothing destructive happened), let the work finish, try again.
      report_.errors.resize(errors_before);
      if (!ResumeQuiesced()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(kQuiesceRetryMs * attempt));
    }
  }

  enum class Quiesced { kAll, kBusy, kFailed };
  /// One quiesce of every participant (see QuiesceAll); busy[i] set where the shim answered
  /// CUDA_ERROR_NOT_READY. kBusy: every failure was one of those.
  Quiesced QuiesceOnce(std::vector<char>& busy) {
    quiesced_.assign(participants_.size(), 0);
    busy_why_.assign(participants_.size(), "");
    std::vector<ParticipantView> stable(participants_.size());
    const bool ok = Phase("quiesce", [&](size_t i) -> Result<uint64_t> {
      auto step = Ask(i, proto::StepRequest{proto::Op::kQuiesce, options_.drain_ms, ""});
      if (!step) {
        if (step.error().code == CUDA_ERROR_NOT_READY) {
          busy[i] = 1;
          busy_why_[i] = step.error().message;
        }
        return step.error();
      }
      quiesced_[i] = 1;
      if (auto s = InspectInto(stable, i); !s) return s.error();
      return uint64_t{0};
    });
    if (!ok) {
      const auto busy_count = static_cast<size_t>(std::count(busy.begin(), busy.end(), 1));
      return busy_count == report_.phases.back().errors.size() ? Quiesced::kBusy
                                                               : Quiesced::kFailed;
    }
    if (auto problems = ValidateTopology(stable); !problems.empty()) {
      report_.errors.insert(report_.errors.end(), problems.begin(), problems.end());
      return Quiesced::kFailed;
    }
    views_ = std::move(stable);
    return Quiesced::kAll;
  }

  /// commit: every participant is told the checkpoint passed its point of no return (the
  /// state file is durable): from now on a lease that runs out no longer rolls a shim back,
  /// so a command killed during the destructive steps leaves no participant ACTIVE while
  /// another is released (each waits for 'cusnap recover').
  bool CommitAll() { return LifecyclePhase(proto::Op::kCommit); }

  /// write_carriers (`cusnap dump` only, after release): each participant that carried
  /// bytes has its carrier in the images directory (its save streamed it there, part files
  /// on several threads; a shim that saved to memory writes them now) and gives its arena
  /// back, so CRIU, whose page writing runs on one thread (docs/MEASURED.md M19), dumps none
  /// of it; the restore streams it back (read_carriers finds it, reallocate reads it). A
  /// failure keeps each carrier where it is; the command then rolls the job forward in place.
  bool WriteCarriersAll() {
    if (options_.images_root == 0) return true;
    const std::string dir = AbsoluteDir(options_.state_dir);
    uint64_t expected = 0;
    for (uint64_t bytes : saved_bytes_) expected += bytes;
    return CarrierFilePhase(proto::Op::kWriteCarrier, [&](size_t i) -> std::optional<std::string> {
      if (saved_bytes_[i] == 0 || dead_[i]) return std::nullopt;
      return dir + "/" + CarrierFileStem(participants_[i]->pid());
    }, expected);
  }

  /// Puts every participant that quiesced back to ACTIVE (a refused checkpoint); false when
  /// any of them could not resume. A state file this checkpoint wrote is removed once every
  /// participant resumed: it describes a checkpoint that did not happen.
  bool ResumeQuiesced() {
    const bool resumed = Phase("resume", [&](size_t i) -> Result<uint64_t> {
      if (!quiesced_[i] || dead_[i]) return uint64_t{0};
      auto step = Ask(i, proto::Op::kResume);
      if (!step) return step.error();
      return uint64_t{0};
    });
    if (resumed && options_.images_root != 0) {
      // A dump's save streamed carriers into the images directory: they are no dump's now.
      if (auto s = RemoveCarrierFiles(options_.state_dir); !s) report_.notes.push_back(s.error().message);
    }
    if (resumed && state_written_) {
      if (auto s = RemoveStateFile(options_.state_dir); !s) {
        report_.errors.push_back("the checkpoint was rolled back, but its state file stays: " +
                                 s.error().message);
      }
    }
    return resumed;
  }

  /// save: the carrier copies every tracked creator allocation to host memory, multicast
  /// teams still in place (the carrier reads each member allocation through a staging
  /// mapping of its own, which a binding does not prevent). Each shim keeps this
  /// checkpoint's id. Each participant must report exactly the bytes of the allocations it
  /// created (SPEC-REFERENCE H.2: carrier replies carry the byte total).
  /// A dump's save streams each carrier from the GPU into its part files in the images
  /// directory (no host copy of it at all); carrier files of an earlier dump there
  /// (check_images allowed only this job's) go first. A refused dump removes what its save
  /// wrote (ResumeAndRefuse).
  bool SaveAll() {
    saved_bytes_.assign(participants_.size(), 0);
    checkpoint_id_ = NewCheckpointId();
    uint64_t expected_total = 0;
    for (const auto& v : views_) expected_total += CreatedBytes(v);
    UniqueFd folder;
    if (options_.images_root != 0) {
      if (auto s = RemoveCarrierFiles(options_.state_dir); !s) {
        report_.errors.push_back(s.error().message);
        return false;
      }
      // The folder goes to each shim as a descriptor (a shim in a container cannot see this
      // command's path), its files by name.
      const std::string dir = AbsoluteDir(options_.state_dir);
      folder.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!folder.valid()) {
        report_.errors.push_back("cannot open " + dir + ": " + std::strerror(errno));
        return false;
      }
    }
    return Phase("save", [&](size_t i) -> Result<uint64_t> {
      proto::StepRequest request{proto::Op::kSave, 0, checkpoint_id_};
      if (folder.valid()) request.carrier_path = CarrierFileStem(participants_[i]->pid());
      auto step = Ask(i, request, folder.valid() ? folder.get() : -1);
      if (!step) return step.error();
      const uint64_t expected = CreatedBytes(views_[i]);
      if (step->bytes != expected) {
        return Error{-1, ProcessText(participants_[i]->pid()) + ": save copied " +
                             std::to_string(step->bytes) + " bytes, but the allocations it " +
                             "created hold " + std::to_string(expected) + " bytes"};
      }
      saved_bytes_[i] = step->bytes;
      NoteCopy(step->copy_ns, step->zero_bytes);
      return step->bytes;
    }, expected_total);
  }

  /// write_state: the state file, atomically and durably (state_file.h), before anything is
  /// destroyed: with every participant's records and carrier byte count, and the id each
  /// shim now holds.
  bool WriteState() {
    return LocalPhase("write_state", [&]() -> Result<uint64_t> {
      StateFile state;
      state.driver = driver_.Describe();
      state.created_unix_s = static_cast<int64_t>(std::time(nullptr));
      state.checkpoint_id = checkpoint_id_;
      auto uuids = driver_.DeviceUuids();
      for (size_t i = 0; i < participants_.size(); ++i) {
        ParticipantState p;
        p.pid = views_[i].pid;
        p.start_time = views_[i].start_time;
        p.saved_bytes = saved_bytes_[i];
        p.records = views_[i].records;
        p.gpus = GpusOf(views_[i], uuids ? *uuids : std::vector<std::string>{});
        state.participants.push_back(std::move(p));
      }
      for (const auto& ph : report_.phases) {
        state.phases.push_back(PhaseTiming{ph.name, ph.elapsed_ms, ph.bytes});
      }
      if (auto s = WriteStateFile(options_.state_dir, state); !s) {
        return Error{s.error().code, "the state file could not be written: " +
                                         s.error().message + "; nothing was released"};
      }
      state_written_ = true;
      return uint64_t{0};
    });
  }

  /// lock: cuCheckpointProcessLock on every participant the driver knows (CUDA calls block
  /// from now on); non-CUDA participants (native_) get no native calls.
  bool NativeLockAll() {
    return Phase("lock", [&](size_t i) -> Result<uint64_t> {
      if (!native_[i]) return uint64_t{0};
      if (auto s = driver_.Lock(participants_[i]->pid(), options_.lock_timeout_ms); !s) {
        return s.error();
      }
      return uint64_t{0};
    });
  }

  /// checkpoint: cuCheckpointProcessCheckpoint on every participant the driver knows.
  bool NativeCheckpointAll() {
    return Phase("checkpoint", [&](size_t i) -> Result<uint64_t> {
      if (!native_[i]) return uint64_t{0};
      if (auto s = driver_.Checkpoint(participants_[i]->pid()); !s) return s.error();
      return uint64_t{0};
    });
  }

  /// "no multicast objects" when no participant's records name one (detach_multicast then
  /// has nothing to do; the phase still runs, every shim steps through it).
  std::string MulticastNote() const {
    for (const auto& v : views_) {
      if (HasMulticast(v.records)) return "";
    }
    return kNoMulticastNote;
  }

  static uint64_t CreatedBytes(const ParticipantView& v) { return coord::CreatedBytes(v.records); }

  /// The GPUs a participant's records name: the locations of the allocations it created and
  /// its access descriptors of kind DEVICE, each an ordinal of its own, named by UUID through
  /// its own device list (INSPECT; the coordinator's ordinals differ whenever the participant
  /// runs with CUDA_VISIBLE_DEVICES). An imported allocation's location is the creator's GPU,
  /// which the creator's record names. `fallback` (the coordinator's devices) serves a
  /// participant that reported no list.
  static std::vector<GpuRef> GpusOf(const ParticipantView& v,
                                    const std::vector<std::string>& fallback) {
    const std::vector<std::string>& uuids = v.device_uuids.empty() ? fallback : v.device_uuids;
    std::map<int, std::string> gpus;
    auto add = [&](int type, int id) {
      if (type == CU_MEM_LOCATION_TYPE_DEVICE && id >= 0 &&
          static_cast<size_t>(id) < uuids.size()) {
        gpus[id] = uuids[static_cast<size_t>(id)];
      }
    };
    for (const auto& r : v.records) {
      if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation) &&
          (r.flags & proto::kCreator) != 0) {
        add(r.location_type, r.location_id);
      }
      for (uint32_t a = 0; a < r.access_count && a < proto::kMaxAccess; ++a) {
        add(r.access[a].location_type, r.access[a].location_id);
      }
    }
    std::vector<GpuRef> out;
    for (const auto& [ordinal, uuid] : gpus) out.push_back(GpuRef{ordinal, uuid});
    return out;
  }

  const CheckpointOptions& options_;
  std::vector<ParticipantView> views_;
  std::vector<std::string> created_dirs_;  ///< by validate (PrepareStateDir), parents first
  std::vector<char> quiesced_;  // char, not bool: written from several threads
  std::vector<std::string> busy_why_;  // per participant: its NOT_READY answer to kQuiesce
  std::vector<uint64_t> saved_bytes_;
  std::string checkpoint_id_;   // NewCheckpointId, given to every shim in kSave
  bool state_written_ = false;  // write_state succeeded: a rollback removes the file
};

constexpr Stage<CheckpointSequence> CheckpointSequence::kStages[] = {
    {&CheckpointSequence::DiscoverPhase, &CheckpointSequence::Refused, false},
    {&CheckpointSequence::InspectAll, &CheckpointSequence::Refused, false},
    {&CheckpointSequence::ValidateAll, &CheckpointSequence::Refused, false},
    {&CheckpointSequence::QuiesceAll, &CheckpointSequence::ResumeAndRefuse, false},
    {&CheckpointSequence::SaveAll, &CheckpointSequence::ResumeAndRefuse, false},
    {&CheckpointSequence::WriteState, &CheckpointSequence::ResumeAndRefuse, false},
    {&CheckpointSequence::CommitAll, &CheckpointSequence::ResumeAndRefuse, false},
    // The point of no return: every byte is in host memory and the state file is durable.
    {&CheckpointSequence::DetachAll, &CheckpointSequence::ResumeOrFail, true},
    {&CheckpointSequence::LifecycleStage<proto::Op::kRelease>, &CheckpointSequence::Failed, true},
    {&CheckpointSequence::WriteCarriersAll, &CheckpointSequence::Failed, true,
     PhaseLines::kWithImages},
    {&CheckpointSequence::NativeLockAll, &CheckpointSequence::Failed, true},
    {&CheckpointSequence::NativeCheckpointAll, &CheckpointSequence::Failed, true},
};

CommandReport CheckpointSequence::Run() {
  report_.state_file = StateFilePath(options_.state_dir);
  return Finish(RunStages(*this, kStages));
}

}  // namespace

const size_t kCheckpointPhaseCount = PhaseLineCount(CheckpointSequence::kStages, false);
const size_t kCheckpointWithImagesPhaseCount = PhaseLineCount(CheckpointSequence::kStages, true);

CommandReport Checkpoint(const CheckpointOptions& options, const Discoverer& discover,
                         CheckpointDriver& driver, PhaseObserver& observer,
                         Interrupt* interrupt) {
  CommandReport report = CheckpointSequence(options, discover, driver, observer, interrupt).Run();
  if (report.outcome != Outcome::kFailedAfterChange) return report;
  // Past the point of no return every shim holds what it needs: bring the job back rather
  // than leave it half taken apart (the failure stays in the report).
  report.notes.push_back("a step after the point of no return failed: rolling the job forward "
                         "from what each process holds");
  CommandReport recovered = Recover(RecoverOptions{options.state_dir, {}, options.lease_ms}, discover, driver, observer);
  MergeInto(report, std::move(recovered));
  report.outcome = report.outcome == Outcome::kOk ? Outcome::kRolledForward
                                                  : Outcome::kFailedAfterChange;
  return report;
}

}  // namespace cusnap::coord
