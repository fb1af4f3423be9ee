// The dump and images-restore sequences (dump.h): one function per phase, run in order.
#include "coordinator/sequences/dump.h"


#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <optional>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>
#include <iterator>
#include <mutex>

#include "common/control_dir.h"
#include "common/ids.h"
#include "common/text.h"
#include "coordinator/images/carrier_files.h"
#include "coordinator/images/criu.h"
#include "coordinator/participants/hold.h"
#include "coordinator/images/manifest.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/images/criu_preconditions.h"
#include "coordinator/images/restore_record.h"
#include "coordinator/images/restored_aliases.h"
#include "coordinator/sequences/sequence.h"
#include "coordinator/record/state_file.h"

namespace cusnap::coord {
namespace {

/// "; the images directory's filesystem is full (N bytes free)" when CRIU failed writing
/// there: its log says "No space left on device", or is cut short by the same full disk (less
/// than kFullBelow bytes free: CRIU writes its images in pieces far larger); "" otherwise.
std::string FullDiskText(const std::string& dir) {
  constexpr uint64_t kFullBelow = 64u << 10;
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return "";
  const uint64_t free = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  std::ifstream log(dir + "/" + kCriuDumpLogName);
  bool said = false;
  for (std::string line; !said && std::getline(log, line);) {
    said = line.find("No space left on device") != std::string::npos;
  }
  if (!said && free >= kFullBelow) return "";
  return "; the images directory's filesystem is full (" + std::to_string(free) +
         " bytes free): free some space or choose another --images-dir";
}

/// The machine's GPUs as the driver numbers them, with their models when it has them.
Result<MachineView> ViewMachine(CheckpointDriver& driver) {
  MachineView view{driver.Describe(), {}, {}};
  auto uuids = driver.DeviceUuids();
  if (!uuids) return uuids.error();
  view.uuids = std::move(*uuids);
  if (auto models = driver.DeviceNames(); models) view.models = std::move(*models);
  return view;
}

class DumpSequence : Sequence {
 public:
  DumpSequence(const DumpOptions& options, const Discoverer& discover, CheckpointDriver& driver,
               PhaseObserver& observer, Interrupt* interrupt)
      : Sequence(discover, driver, observer, interrupt), options_(options) {}

  /// Runs kStages in order (below).
  CommandReport Run();

  /// check_images (read-only) -> the checkpoint (its own phases) -> criu_dump (the processes
  /// are gone, or run on with --leave-running) -> write_manifest -> [the restore's phases].
  static const Stage<DumpSequence> kStages[];
  /// CRIU run by the caller (DumpOptions::caller_criu_version): check_images -> the
  /// checkpoint -> hand_over_to_criu.
  static const Stage<DumpSequence> kStagesForCriu[];

 private:
  bool ByCriu() const { return !options_.caller_criu_version.empty(); }
  const std::string& Dir() const { return options_.checkpoint.state_dir; }
  Outcome Refused() { return Outcome::kRefused; }
  Outcome Nested() { return nested_; }
  Outcome Failed() { return Outcome::kFailedAfterChange; }
  /// write_manifest failed (a full disk; `recover` cannot finish this one):
  /// CRIU's images are complete, and without --leave-running they are all that is left of
  /// the job; the pending manifest names them, and `restore --images-dir` completes the dump
  /// (CompleteInterruptedDump). With --leave-running the job is released in place: recover.
  Outcome OnlyImagesLeft() {
    if (!options_.leave_running) {
      report_.finish_with = "the job is on disk only (CRIU's images are complete): once there "
                            "is space, 'cusnap restore --images-dir " + Dir() + "' writes the "
                            "manifest and brings the job back";
    }
    return Outcome::kFailedAfterChange;
  }
  /// CRIU failed: its processes run on (CRIU resumes a tree it could not dump), released;
  /// they are restored in place.
  Outcome RestoreInPlace() {
    report_.notes.push_back(std::string(ByCriu() ? "the hand-over to CRIU failed"
                                                 : "criu dump failed") +
                            ": restoring the job in place from what each process holds");
    if (!ResumeJob()) return Outcome::kFailedAfterChange;  // the state file stays, for recover
    RemoveFailedDump();
    return Outcome::kRolledForward;
  }

  /// After a failed dump was rolled forward: what CRIU and the checkpoint wrote into the
  /// images directory is no dump (and the state file no longer the job's state), so it goes;
  /// CRIU's logs (*.log) stay, and `inspect` names the directory as a failed dump by them.
  void RemoveFailedDump() {
    for (auto& left : DiscardFailedDump(Dir())) report_.notes.push_back(std::move(left));
  }


  /// check_images: CRIU is there and runs, and the images directory holds no dump of
  /// another job that still runs (its restore would make a second copy of that job).
  /// Its line names the CRIU that will dump the job ("CRIU 4.2.1 at <path>").
  bool CheckTarget() {
    CheckSummary summary;
    return CheckPhase("check_images", [&]() -> std::vector<std::string> {
      if (ByCriu()) {
        criu_version_ = options_.caller_criu_version;
        summary.note = "CRIU " + CriuVersionNumber(criu_version_) + ", which called cusnap";
      } else if (auto problems = CheckOwnCriu(summary); !problems.empty()) {
        return problems;
      }
      if (std::string why = AnotherJobsDump(); !why.empty()) return {why};
      if (IsHeld(options_.control_dir, options_.root_pid)) {
        if (std::string in_place = CheckpointedInPlaceText(Dir()); !in_place.empty()) {
          return {in_place + ", then dump it again"};
        }
      }
      job_control_dir_ = ShimControlDir(options_.root_pid).value_or(options_.control_dir);
      return {};
    }, &summary);
  }

  /// The CRIU cusnap runs is there and runs, and can dump the job's tree as far as cusnap can
  /// tell (CriuCannotDump, PipesWrittenOutsideProblems); its line names it.
  std::vector<std::string> CheckOwnCriu(CheckSummary& summary) {
    auto criu = FindCriu();
    if (!criu) return {criu.error().message};
    criu_ = *criu;
    auto version = CriuVersion(criu_);
    if (!version) return {version.error().message};
    criu_version_ = *version;
    summary.note = "CRIU " + CriuVersionNumber(criu_version_) + " at " + criu_;
    std::vector<std::string> problems = PipesWrittenOutsideProblems();
    if (std::string why = CriuCannotDump(); !why.empty()) problems.insert(problems.begin(), why);
    return problems;
  }

  /// Why the images directory cannot take this dump, "" when it can: it holds the dump of
  /// another job that could still be restored (a complete dump, or one interrupted after CRIU
  /// finished), or whose job still runs. Replacing it would lose that job for good once its
  /// processes are gone (a second job dumped into the same directory would replace the
  /// first one's only copy). The same job's earlier dump (this job dumped with
  /// --leave-running, or restored from it: the same root pid and, through its start-time
  /// alias, start time) is replaced.
  std::string AnotherJobsDump() const {
    if (!HasManifest(Dir()) && !HasPendingManifest(Dir())) return "";
    auto old = HasManifest(Dir()) ? ReadManifest(Dir()) : ReadPendingManifest(Dir());
    if (!old) return old.error().message + "; cusnap does not overwrite it";
    if (old->root_pid == options_.root_pid &&
        ProcessStartTime(options_.root_pid) == old->root_start_time) {
      return "";
    }
    const bool runs = AliveHere(old->root_pid, old->root_start_time);
    const bool restorable = HasManifest(Dir()) || WhyCriuDumpIncomplete(Dir()).empty();
    if (!runs && !restorable) return "";  // what an interrupted dump left: no dump
    return Dir() + " holds the dump of another job (root pid " + std::to_string(old->root_pid) +
           (runs ? ", still running" : ", which 'cusnap restore --images-dir " + Dir() +
                                           "' brings back") +
           "); cusnap does not overwrite it: use another --images-dir, or remove that dump "
           "first (rm -r " + Dir() + ")";
  }

  /// Why CRIU could not dump the job's tree (WhyCriuCannotDump of its first process that
  /// CRIU would stop at), "" when it can as far as cusnap can tell: refused here, before the
  /// checkpoint takes the GPUs away.
  std::string CriuCannotDump() const {
    for (int pid : ProcessTree(options_.root_pid)) {
      if (std::string why = WhyCriuCannotDump(pid); !why.empty()) {
        return "process " + ProcessName(pid) + " (" + ProcessText(pid) + ") " + why;
      }
    }
    return "";
  }

  /// One problem for each pipe the job writes whose reader is outside it
  /// (PipesWrittenOutside): CRIU would restore it as a new pipe nobody reads, and the restored
  /// job would die of SIGPIPE at its next write there (`cusnap run -- job | cat`). Refused,
  /// like what CRIU cannot dump, before the checkpoint.
  std::vector<std::string> PipesWrittenOutsideProblems() const {
    std::vector<std::string> problems;
    for (const auto& p : PipesWrittenOutside(ProcessTree(options_.root_pid))) {
      problems.push_back(
          ProcessText(p.pid, ProcessName(p.pid)) + " writes to a pipe (descriptor " +
          std::to_string(p.fd) + ") whose reader is outside the job: CRIU would restore it as "
          "a new pipe that nobody reads, and the restored job's writes there would fail "
          "(EPIPE, SIGPIPE); " +
          (p.fd <= 2 ? std::string("give the job a file for that output, e.g. `cusnap run -- "
                                   "job > log 2>&1`")
                     : "start the job without it (a descriptor it inherited: `cusnap run -- "
                       "job " + std::to_string(p.fd) + ">&-`) or give it a file") +
          " (docs/DUMP.md)");
    }
    return problems;
  }

  /// Every checkpoint phase (coordinator.h), its report merged into this one.
  bool CheckpointJob() {
    root_start_ = ProcessStartTime(options_.root_pid).value_or(0);
    MergeInto(report_, Checkpoint(options_.checkpoint, discover_, driver_, observer_, interrupt_));
    nested_ = report_.outcome;
    return nested_ == Outcome::kOk;
  }

  /// criu_dump: the tree to disk; bytes are the image files CRIU wrote. The pending
  /// manifest (images.h) goes first: once CRIU ran, the job's processes may be gone, and a
  /// dump whose CLI died then must still be restorable. While CRIU runs,
  /// the observer hears how many bytes are on disk so far (the progress bar), against the
  /// carriers' bytes (the bulk of the images; the process memory beyond them is not known
  /// in advance, so the bar may fill before CRIU is done).
  bool CriuDump() {
    return LocalPhase("criu_dump", [&]() -> Result<uint64_t> {
      // The carriers write_carriers did not write out are in the process memory CRIU writes.
      uint64_t expected = 0;
      for (const auto& ph : report_.phases) {
        if (ph.name == "save") expected += ph.bytes;
        if (ph.name == "write_carriers") expected -= std::min(expected, ph.bytes);
      }
      // Bytes CRIU wrote: what the directory holds less the carrier files (written before).
      const auto criu_bytes = [&] {
        const uint64_t all = ImageBytes(Dir()), carriers = CarrierFileBytes(Dir());
        return all > carriers ? all - carriers : 0;
      };
      auto pending = DescribeDump();
      if (!pending) return pending.error();
      pending->files = CarrierFiles();
      // check_images made sure an earlier dump here is of this job, which runs: replaced.
      if (auto s = RemovePreviousDump(Dir()); !s) return s.error();
      if (auto s = WritePendingManifest(Dir(), *pending); !s) return s.error();
      // The bar's ticks wait on a condition variable, not a sleep: the join after CRIU ended
      // waited out the tick's sleep, up to 200 ms of every dump (criu_dump took 805-808 or
      // 1006-1009 ms on the GPU machine, M24).
      std::mutex mutex;
      std::condition_variable ended;
      bool done = false;
      std::thread progress([&] {
        std::unique_lock lock(mutex);
        while (!done) {
          lock.unlock();
          const uint64_t now = criu_bytes();
          observer_.BytesMoved("criu_dump", std::min(now, expected), std::max(now, expected));
          lock.lock();
          ended.wait_for(lock, std::chrono::milliseconds(200), [&] { return done; });
        }
      });
      Status dumped = RunCriu(criu_, CriuDumpArgs(options_.root_pid, Dir(), options_.leave_running),
                              Dir(), kCriuDumpLogName);
      {
        std::lock_guard lock(mutex);
        done = true;
      }
      ended.notify_all();
      progress.join();
      if (!dumped && WhyCriuDumpIncomplete(Dir()).empty()) {
        // CRIU finished the dump (it said so last, after it ended or resumed the tree) and
        // was ended by a signal after: the images are the dump.
        report_.notes.push_back("criu finished the dump, then exited with an error (" +
                                dumped.error().message + "); the images are complete");
      } else if (!dumped) {
        // CRIU resumes a tree it could not dump, and a CRIU that was killed leaves the tree
        // running too (the kernel detaches its tracees): it is restored in place next, and
        // what CRIU left in the directory is no dump. Were processes ended already, the
        // pending manifest stays: `restore --images-dir` then says what can be done.
        if (TreeRuns()) {
          if (auto s = RemovePendingManifest(Dir()); !s) report_.notes.push_back(s.error().message);
        } else {
          report_.notes.push_back("processes of the job ended while CRIU dumped it; " + Dir() +
                                  " keeps what CRIU wrote ('cusnap inspect' names its state)");
        }
        return Error{dumped.error().code, dumped.error().message + FullDiskText(Dir())};
      }
      return criu_bytes();
    });
  }

  /// hand_over_to_criu: the pending manifest (images.h) beside the carrier files, for the
  /// CRIU that called cusnap to dump the processes next; CompleteDumpByCriu makes it the
  /// manifest once CRIU is done.
  bool HandOverToCriu() {
    return LocalPhase("hand_over_to_criu", [&]() -> Result<uint64_t> {
      auto pending = DescribeDump();
      if (!pending) return pending.error();
      pending->files = CarrierFiles();
      if (auto s = RemovePreviousDump(Dir()); !s) return s.error();
      if (auto s = WritePendingManifest(Dir(), *pending); !s) return s.error();
      return uint64_t{0};
    });
  }

  /// Whether every participant the checkpoint found still runs (the same process: start
  /// time).
  bool TreeRuns() const {
    auto state = ReadStateFile(Dir());
    if (!state) return false;
    for (const auto& p : state->participants) {
      if (!AliveHere(p.pid, p.start_time)) return false;
    }
    return true;
  }

  /// write_manifest: every image file's chunk digests (the carriers' as their shims wrote
  /// them, CRIU's images and the state file read and digested here), the machine's GPUs and
  /// driver, each participant's bytes; bytes are the ones read back to digest (CRIU's).
  bool WriteManifestPhase() {
    return LocalPhase("write_manifest", [&]() -> Result<uint64_t> {
      auto m = DescribeDump();
      if (!m) return m.error();
      auto files = DescribeImageFiles(Dir(), CarrierFiles());
      if (!files) return files.error();
      m->files = std::move(*files);
      if (auto s = WriteManifest(Dir(), *m); !s) return s.error();
      // The manifest supersedes it (a pending manifest left beside one is ignored).
      if (auto s = RemovePendingManifest(Dir()); !s) report_.notes.push_back(s.error().message);
      return m->TotalBytes() - CarrierBytes(m->files);
    });
  }

  /// The carrier files write_carriers wrote, with their shims' digests.
  std::vector<ImageFile> CarrierFiles() const {
    std::vector<ImageFile> files;
    for (const auto& written : report_.carrier_files) files.push_back(ImageFileOf(written));
    return files;
  }

  /// Bytes of the carrier files among `files`.
  static uint64_t CarrierBytes(const std::vector<ImageFile>& files) {
    uint64_t total = 0;
    for (const auto& f : files) total += IsCarrierFile(f.name) ? f.bytes : 0;
    return total;
  }

  /// The manifest of this dump without its files: the state file the checkpoint wrote, the
  /// machine's GPUs and driver, CRIU's version, the job's root. Errors: the state file's
  /// (ReadStateFile), the driver's (ViewMachine).
  Result<Manifest> DescribeDump() {
    auto state = ReadStateFile(Dir());
    if (!state) return state.error();
    auto machine = ViewMachine(driver_);
    if (!machine) return machine.error();
    Manifest m;
    m.cusnap_version = options_.cusnap_version;
    m.driver = machine->driver;
    m.criu_version = criu_version_;
    m.created_unix_s = static_cast<int64_t>(std::time(nullptr));
    m.checkpoint_id = state->checkpoint_id;
    m.root_pid = options_.root_pid;
    m.root_start_time = root_start_;
    m.left_running = options_.leave_running;
    m.own_pid_namespace = options_.own_pid_namespace;
    m.control_dir = job_control_dir_;
    for (size_t i = 0; i < machine->uuids.size(); ++i) {
      m.gpus.push_back(ImagesGpu{static_cast<int>(i), machine->uuids[i],
                                 i < machine->models.size() ? machine->models[i] : ""});
    }
    for (const auto& p : state->participants) {
      ImagesParticipant ip{p.pid, p.start_time, p.saved_bytes, {}};
      for (const auto& g : p.gpus) ip.gpus.push_back(g.uuid);
      m.participants.push_back(std::move(ip));
    }
    return m;
  }

  /// With --leave-running: every restore phase, in place (the processes never left).
  bool ResumeIfLeftRunning() {
    if (!options_.leave_running) return true;
    // Its phase names repeat the checkpoint's: say what they are.
    observer_.Remark("--leave-running: the job is on disk; it goes on in place now (the phases "
                     "of 'cusnap restore' follow)");
    return ResumeJob();
  }

  bool ResumeJob() {
    // The checkpoint left the job held, stopped (hold.h): its endpoints answer only once
    // continued, as `cusnap restore` does first.
    for (auto& problem : ContinueHeldJob(options_.control_dir, options_.root_pid)) {
      report_.notes.push_back(std::move(problem));
    }
    const RestoreOptions restore{Dir(), {}, options_.checkpoint.lease_ms};
    MergeInto(report_, Restore(restore, discover_, driver_, observer_, nullptr));
    return report_.outcome == Outcome::kOk;
  }

  const DumpOptions& options_;
  std::string criu_, criu_version_;
  std::string job_control_dir_;  // where the job's endpoints are (check_images)
  uint64_t root_start_ = 0;
  Outcome nested_ = Outcome::kOk;
};

constexpr Stage<DumpSequence> DumpSequence::kStages[] = {
    {&DumpSequence::CheckTarget, &DumpSequence::Refused, false},
    {&DumpSequence::CheckpointJob, &DumpSequence::Nested, false, PhaseLines::kNested},
    {&DumpSequence::CriuDump, &DumpSequence::RestoreInPlace, true},
    {&DumpSequence::WriteManifestPhase, &DumpSequence::OnlyImagesLeft, true},
    {&DumpSequence::ResumeIfLeftRunning, &DumpSequence::Failed, true},
};

// A failure after the checkpoint rolls the job forward in place: CRIU, which called cusnap,
// has not seized anything yet.
constexpr Stage<DumpSequence> DumpSequence::kStagesForCriu[] = {
    {&DumpSequence::CheckTarget, &DumpSequence::Refused, false},
    {&DumpSequence::CheckpointJob, &DumpSequence::Nested, false, PhaseLines::kNested},
    {&DumpSequence::HandOverToCriu, &DumpSequence::RestoreInPlace, true},
};

CommandReport DumpSequence::Run() {
  report_.state_file = StateFilePath(Dir());
  report_.images_dir = Dir();
  return Finish(ByCriu() ? RunStages(*this, kStagesForCriu) : RunStages(*this, kStages));
}

class ImagesRestoreSequence : Sequence {
 public:
  ImagesRestoreSequence(const ImagesRestoreOptions& options, CheckpointDriver& driver,
                        PhaseObserver& observer, Interrupt* interrupt)
      : Sequence(no_discoverer_, driver, observer, interrupt), options_(options) {}

  /// Runs kStages in order (below).
  CommandReport Run();

  /// check_images (read-only: a refusal changes nothing) -> criu_restore -> every restore
  /// phase on the tree CRIU brought back.
  static const Stage<ImagesRestoreSequence> kStages[];
  /// check_images alone (ImagesRestoreOptions::check_only).
  static const Stage<ImagesRestoreSequence> kCheckStages[];

 private:
  Outcome Refused() { return Outcome::kRestoreRefused; }
  /// The nested restore's outcome, except that its refusal comes after CRIU brought the
  /// tree back: the job was changed (it runs again, released), and `cusnap restore` or
  /// `recover` with the images directory as state directory finishes it.
  Outcome Nested() {
    if (carriers_refused_) return Outcome::kRestoreRefused;  // the tree was ended (RestoreJob)
    return nested_ == Outcome::kRestoreRefused ? Outcome::kFailedAfterChange : nested_;
  }

  /// check_images: the manifest, every file's size, the digests of every file but the
  /// carriers (CRIU's images and the state file: read here, before CRIU restores anything;
  /// each carrier chunk is checked as read_carriers reads it), the carriers' holes, driver,
  /// GPU count and models, the device map, and no running copy of the job (CheckImages). Its
  /// line counts the files and the bytes read.
  bool CheckAll() {
    // The carriers are read once the processes are back (reallocate): from a cold disk,
    // they come into the page cache meanwhile, beside this check's reads and CRIU's.
    if (!options_.check_only) prefetch_.emplace(options_.images_dir);
    CheckSummary summary;
    return CheckPhase("check_images", [&]() -> std::vector<std::string> {
      auto manifest = ReadManifest(options_.images_dir);
      const bool interrupted =
          !manifest && manifest.error().code == ENOENT && HasPendingManifest(options_.images_dir);
      if (interrupted) {
        // A dump whose CLI died once CRIU had run: complete when CRIU finished (its manifest
        // is written at criu_restore, the first change), refused naming why otherwise.
        manifest = CompleteInterruptedDump(options_.images_dir);
        complete_dump_ = manifest.ok();
        if (complete_dump_) {
          report_.notes.push_back(options_.images_dir + " holds a dump interrupted after CRIU "
                                  "finished it: its manifest is written from CRIU's images");
        }
      }
      if (!manifest) {
        // CompleteInterruptedDump's refusal names the command that resumes the job itself.
        const std::string in_place = interrupted ? "" : CheckpointedInPlaceText(options_.images_dir);
        return {manifest.error().message + (in_place.empty() ? "" : "; " + in_place)};
      }
      manifest_ = std::move(*manifest);
      if (options_.criu_restored_root > 0) return {};  // checked before CRIU restored it
      auto machine = ViewMachine(driver_);
      if (!machine) return {machine.error().message};
      std::vector<UuidPair> pairs;
      // The plugin's check of a job in a PID namespace of its own (a container): runc has
      // CRIU restore the container's mounts, so the job's control directory is a path among
      // them, not on this machine, and is not looked for here (CRIU fails the restore itself,
      // before any process runs, when it cannot bind a socket there).
      Manifest checked = manifest_;
      if (options_.check_only && manifest_.own_pid_namespace) checked.control_dir.clear();
      const ReadScope scope = options_.check_only ? ReadScope::kEveryByte : ReadScope::kBeforeCriu;
      auto problems = CheckImages(options_.images_dir, checked, *machine, options_.device_map,
                                  RunningHere(options_.control_dir), pairs,
                                  options_.resume_root > 0, scope);
      if (!options_.check_only) {  // the plugin's restore: the container's mounts hold it
        if (auto other = OtherControlDirProblem(manifest_, options_.control_dir); !other.empty()) {
          problems.push_back(std::move(other));
        }
      }
      summary.note = std::to_string(manifest_.files.size()) + " files";
      summary.bytes = options_.check_only ? manifest_.TotalBytes()
                                          : manifest_.CriuBytes() - manifest_.CriuPageBytes();
      if (problems.empty()) {
        auto criu = FindCriu();
        if (criu) criu_ = *criu; else problems.push_back(criu.error().message);
      }
      if (!problems.empty() && scope == ReadScope::kBeforeCriu) {
        // No CRIU runs: a refusal names every damaged file, the page images' too, each once
        // (a missing or cut page image is named by both checks alike).
        for (auto& p : CheckImageFiles(options_.images_dir, manifest_, 0, ReadScope::kCriuPages)) {
          if (std::ranges::find(problems, p) == problems.end()) problems.push_back(std::move(p));
        }
      }
      return problems;
    }, &summary);
  }

  /// criu_restore: the tree back from disk (new processes, the recorded pids), each given its
  /// checkpointed identity (NoteRestored); bytes are the image files CRIU read. A failed CRIU
  /// restore leaves no process behind; a failure after it ends what CRIU brought back
  /// (EndRestoredTree), so that a refusal still changed nothing. The restore record
  /// (restore_record.h) is held from before CRIU runs until every identity is written: a
  /// restore killed in between is taken up by the next one (options_.resume_root).
  bool CriuRestore() {
    return LocalPhase("criu_restore", [&]() -> Result<uint64_t> {
      if (complete_dump_) {
        if (auto s = WriteManifest(options_.images_dir, manifest_); !s) return s.error();
        if (auto s = RemovePendingManifest(options_.images_dir); !s) return s.error();
      }
      if (options_.criu_restored_root > 0) {
        root_pid_ = options_.criu_restored_root;
        return NoteIdentities() ? Result<uint64_t>(manifest_.CriuBytes()) : Result<uint64_t>(identity_error_);
      }
      const bool resuming = options_.resume_root > 0;
      auto record = BeginRestoreRecord(options_.images_dir, resuming);
      if (!record) return record.error();
      record_ = std::move(*record);
      started_ = KernelStartTime(::getpid());
      if (resuming) {
        root_pid_ = options_.resume_root;  // the CLI said so
        // The tree an interrupted restore brought back is stopped still; its pages unchecked.
        if (auto damage = PageDamage(CheckImageFiles(options_.images_dir, manifest_, 0,
                                                     ReadScope::kCriuPages))) {
          return EndRestoredTree(*damage, kMendThenRestore);
        }
      } else if (Status s = RunCriuRestore(); !s) {
        return s.error();
      }
      if (!NoteIdentities()) return EndRestoredTree(identity_error_);
      if (auto s = EndRestoreRecord(options_.images_dir, record_); !s) {
        report_.notes.push_back(s.error().message);
      }
      return resuming ? uint64_t{0} : manifest_.CriuBytes();
    });
  }

  /// `criu restore` of the tree into root_pid_, CRIU's page images read beside it (CRIU
  /// leaves every process it brings back stopped: damage found there ends them before any
  /// ran application code again). On failure the restore record is dropped and nothing CRIU
  /// brought back is left; the error names the damaged file before CRIU's own failure.
  Status RunCriuRestore() {
    // CRIU will not write a pid file that exists: an earlier restore from here left one.
    if (::unlink((options_.images_dir + "/restored.pid").c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      (void)EndRestoreRecord(options_.images_dir, record_);
      return Error{err, "cannot remove " + options_.images_dir + "/restored.pid: " +
                            std::strerror(err)};
    }
    auto pages = CheckPagesBesideCriu();
    const Status criu = RunCriu(criu_, CriuRestoreArgs(options_.images_dir), options_.images_dir,
                                kCriuRestoreLogName);
    const auto damage = PageDamage(pages.get());
    if (!criu) {
      // CRIU failed on what it read: the damage, not CRIU's symptom, is the cause.
      (void)EndRestoreRecord(options_.images_dir, record_);
      return damage ? *damage : criu.error();
    }
    auto root = RestoredRootPid(options_.images_dir);
    if (root) root_pid_ = *root;
    if (damage) return EndRestoredTree(*damage, kMendThenRestore);
    if (!root) return EndRestoredTree(root.error());
    return Ok{};
  }

  /// CheckImageFiles of CRIU's page images (ReadScope::kCriuPages) on a thread of its own,
  /// started now; run by get() when no thread can be had.
  std::future<std::vector<std::string>> CheckPagesBesideCriu() const {
    auto check = [dir = options_.images_dir, &manifest = manifest_] {
      return CheckImageFiles(dir, manifest, 0, ReadScope::kCriuPages);
    };
    try {
      return std::async(std::launch::async, check);
    } catch (const std::system_error&) {
      return std::async(std::launch::deferred, check);
    }
  }

  /// The refusal for damaged page images (`problems`, each naming its file); nullopt for none.
  static std::optional<Error> PageDamage(const std::vector<std::string>& problems) {
    if (problems.empty()) return std::nullopt;
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : "; ") + p;
    return Error{EBADMSG, text};
  }

  /// Gives each participant CRIU brought back its checkpointed identity (NoteRestored);
  /// false with identity_error_ set when one did not come back or cannot be given it.
  bool NoteIdentities() {
    std::vector<int> pids;
    for (const auto& p : manifest_.participants) pids.push_back(p.pid);
    const std::vector<uint64_t> inside = StartTimesSeenFrom(root_pid_, pids);
    for (size_t i = 0; i < pids.size(); ++i) {
      if (IsZombie(pids[i])) {
        // It died after the checkpoint and CRIU dumped it as the zombie it was. Without its
        // identity back it reads as exited, and the restore recovers the others without it.
        report_.notes.push_back(ProcessText(pids[i]) + " of the dump had exited "
                                "before CRIU dumped it: the job is restored without it");
        continue;
      }
      if (auto s = NoteRestored(pids[i], inside[i], manifest_.participants[i].start_time); !s) {
        identity_error_ = s.error();
        return false;
      }
    }
    return true;
  }

  /// What EndRestoredTree tells to do when an image file was damaged.
  static constexpr const char* kMendThenRestore =
      "mend the damaged image file this restore names (or restore from an unchanged copy of the "
      "images) and run the restore again";

  /// Ends the processes CRIU brought back, before any restore phase ran on them (they are
  /// stopped: CRIU leaves them so, CriuRestoreArgs), and drops the restore record: the images
  /// are as they were, and the restore can be run again (`then`: what to do first). Returns
  /// `why`, the failure.
  Error EndRestoredTree(Error why, const std::string& then = "run the restore again") {
    EndTree(then);
    if (auto s = EndRestoreRecord(options_.images_dir, record_); !s) {
      report_.notes.push_back(s.error().message);
    }
    return why;
  }

  /// Ends the processes CRIU brought back (SIGKILL, waited for), saying so and `then` (what
  /// to do next) when there were any.
  void EndTree(const std::string& then) {
    const int root = root_pid_ > 0 ? root_pid_ : InterruptedRestoreRoot(manifest_, started_);
    const std::vector<int> tree = root > 0 ? ProcessTree(root) : std::vector<int>{};
    for (const int pid : tree) ::kill(pid, SIGKILL);
    for (const int pid : tree) {
      for (int i = 0; i < 500 && !ProcessExited(pid); ++i) ::usleep(2'000);
    }
    if (!tree.empty()) {
      report_.notes.push_back("the " + std::to_string(tree.size()) + " processes CRIU brought "
                              "back were ended before any of them ran application code again; " +
                              options_.images_dir + " is as it was: " + then);
    }
    root_pid_ = 0;
  }

  /// The control directory of the restored job: the job control directory below ours its
  /// environment names (a `cusnap run --pid-namespace` job, common/control_dir.h), else ours.
  /// Its shims read their aliases there.
  std::string RestoredJobControlDir() const {
    const auto dir = ShimControlDir(root_pid_);
    return dir && IsJobControlDir(options_.control_dir, *dir) ? *dir : options_.control_dir;
  }

  /// Writes the alias that gives restored process `pid` its checkpointed identity back
  /// (common/ids.h, ProcessStartTime): "<its new start time> <as the tree sees it> <original>".
  Status NoteRestored(int pid, uint64_t inside, uint64_t original) {
    if (KernelStartTime(pid) == 0) {
      return Error{ESRCH, ProcessText(pid) + " of the dump did not come back " +
                              "from criu restore"};
    }
    return WriteRestoredAlias(RestoredJobControlDir(), pid, inside, original);
  }


  /// Every restore phase (coordinator.h) on the restored tree, its report merged.
  bool RestoreJob() {
    const RestoreOptions restore{options_.images_dir, options_.device_map, options_.lease_ms};
    MergeInto(report_, Restore(restore, options_.discoverer_for(root_pid_), driver_, observer_,
                               nullptr));
    report_.restored_root = root_pid_;
    nested_ = report_.outcome;
    if (nested_ != Outcome::kOk && CarrierFileFailed()) {
      // A carrier file that cannot be found, or read back whole and as written (a chunk whose
      // bytes do not match their digest, a read error, as reallocate streams it to the GPU):
      // no application call passed its gate. The images are the job: the tree goes, as a
      // refusal of check_images would have left it, and the restore runs again once the
      // file is mended.
      EndTree("mend the carrier file this restore names (or restore from an unchanged copy of "
              "the images) and run the restore again");
      nested_ = Outcome::kRestoreRefused;
      carriers_refused_ = true;
    }
    return nested_ == Outcome::kOk;
  }

  /// The nested restore stopped at a carrier file: read_carriers could not find one, or
  /// reallocate could not read one back (kCarrierFileUnreadable).
  bool CarrierFileFailed() const {
    if (report_.phases.empty() || report_.phases.back().ok()) return false;
    const PhaseReport& last = report_.phases.back();
    if (last.name == "read_carriers") return true;
    return last.name == "reallocate" &&
           std::ranges::find(last.error_codes, kCarrierFileUnreadable) != last.error_codes.end();
  }

  Discoverer no_discoverer_;  // this sequence discovers through Restore's own discoverer
  const ImagesRestoreOptions& options_;
  Manifest manifest_;
  bool complete_dump_ = false;  // manifest_ completes an interrupted dump (CheckAll)
  std::string criu_;
  UniqueFd record_;        // the restore record's lock (criu_restore)
  Error identity_error_;   // why NoteIdentities failed
  uint64_t started_ = 0;   // this process's kernel start time (the fresh record's)
  int root_pid_ = 0;
  Outcome nested_ = Outcome::kOk;
  bool carriers_refused_ = false;  // read_carriers failed: the tree was ended (RestoreJob)
  std::optional<CarrierPrefetch> prefetch_;  // from check_images to the command's end
};

constexpr Stage<ImagesRestoreSequence> ImagesRestoreSequence::kStages[] = {
    {&ImagesRestoreSequence::CheckAll, &ImagesRestoreSequence::Refused, false},
    {&ImagesRestoreSequence::CriuRestore, &ImagesRestoreSequence::Refused, true},
    {&ImagesRestoreSequence::RestoreJob, &ImagesRestoreSequence::Nested, true, PhaseLines::kNested},
};

// The plugin's check, before CRIU restores anything.
constexpr Stage<ImagesRestoreSequence> ImagesRestoreSequence::kCheckStages[] = {
    {&ImagesRestoreSequence::CheckAll, &ImagesRestoreSequence::Refused, false},
};

CommandReport ImagesRestoreSequence::Run() {
  report_.state_file = StateFilePath(options_.images_dir);
  report_.images_dir = options_.images_dir;
  return Finish(options_.check_only ? RunStages(*this, kCheckStages) : RunStages(*this, kStages));
}

}  // namespace

const size_t kDumpPhaseCount =
    PhaseLineCount(DumpSequence::kStages, true, kCheckpointWithImagesPhaseCount);
const size_t kImagesRestorePhaseCount =
    PhaseLineCount(ImagesRestoreSequence::kStages, true, kRestoreWithImagesPhaseCount);

CommandReport Dump(const DumpOptions& options, const Discoverer& discover,
                   CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt) {
  return DumpSequence(options, discover, driver, observer, interrupt).Run();
}

Status CompleteDumpByCriu(const std::string& images_dir) {
  auto pending = ReadPendingManifest(images_dir);
  if (!pending) return pending.error();
  auto files = DescribeImageFiles(images_dir, pending->files);
  if (!files) return files.error();
  pending->files = std::move(*files);
  if (auto s = WriteManifest(images_dir, *pending); !s) return s;
  return RemovePendingManifest(images_dir);
}

std::vector<std::string> DiscardFailedDump(const std::string& images_dir) {
  std::vector<std::string> left;
  if (auto s = RemovePendingManifest(images_dir); !s) left.push_back(s.error().message);
  if (auto s = RemovePreviousDump(images_dir); !s) left.push_back(s.error().message);
  if (auto s = RemoveCarrierFiles(images_dir); !s) left.push_back(s.error().message);
  std::error_code ec;
  if (!std::filesystem::remove(StateFilePath(images_dir), ec) && ec) {
    left.push_back("cannot remove " + StateFilePath(images_dir) + ": " + ec.message());
  }
  return left;
}

CommandReport RestoreImages(const ImagesRestoreOptions& options, CheckpointDriver& driver,
                            PhaseObserver& observer, Interrupt* interrupt) {
  return ImagesRestoreSequence(options, driver, observer, interrupt).Run();
}

}  // namespace cusnap::coord
