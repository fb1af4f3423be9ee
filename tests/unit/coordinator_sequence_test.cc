// The checkpoint and restore sequences (coordinator/coordinator.h) over fake participants
// and a fake native driver: phase order, barriers, concurrency inside a phase, resume on a
// refusal, loud failures after a destructive step, restore refusals and verification.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <filesystem>
#include <fstream>

#include "coordinator/coordinator.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/images/criu_preconditions.h"
#include "coordinator/record/state_file.h"
#include "coordinator_printers.h"
#include "unit/coordinator_fakes.h"
#include "unit/coordinator_phases.h"
#include "unit/coordinator_fixtures.h"

namespace cusnap::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class SequenceTest : public FakeJobTest {
 protected:
  SequenceTest() : FakeJobTest("seq-test") {}

  coord::CommandReport RunCheckpoint(unsigned lock_timeout_ms = 0) {
    return coord::Checkpoint({dir_, lock_timeout_ms, target_}, FakeDiscoverer(processes_, job_), driver_,
                             observer_);
  }
  coord::CommandReport RunRestore(std::vector<coord::DevicePair> map = {}) {
    return coord::Restore({dir_, std::move(map)}, FakeDiscoverer(processes_, job_), driver_,
                          observer_);
  }
  static std::vector<std::string> Names(const coord::CommandReport& r) {
    std::vector<std::string> names;
    for (const auto& p : r.phases) names.push_back(p.name);
    return names;
  }
  /// True when every log entry starting with `first` precedes every entry starting with
  /// `second` (the barrier between two phases).
  bool Before(const std::string& first, const std::string& second, size_t from = 0) {
    const auto log = job_.log();
    size_t last_first = 0, first_second = log.size();
    for (size_t i = from; i < log.size(); ++i) {
      if (log[i].rfind(first, 0) == 0) last_first = i;
      if (log[i].rfind(second, 0) == 0 && first_second == log.size()) first_second = i;
    }
    return last_first < first_second;
  }

  std::string target_;  ///< CheckpointOptions::target
  RecordingObserver observer_;
};

const std::vector<std::string> kCheckpointPhases = {
    "discover", "inspect",          "validate", "quiesce", "save",
    "write_state", "commit", "detach_multicast", "release", "lock", "checkpoint"};
const std::vector<std::string> kRestorePhases = {
    "read_state", "discover",         "match",            "restore",          "unlock",
    "reallocate", "import",           "multicast_create", "multicast_import",
    "multicast_join", "multicast_bind", "verify",         "activate"};

TEST_F(SequenceTest, CheckpointRunsEveryPhaseInOrder) {
  const auto report = RunCheckpoint(250);
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_EQ(Names(report), kCheckpointPhases);
  EXPECT_EQ(observer_.finished, kCheckpointPhases);
  EXPECT_EQ(coord::kCheckpointPhaseCount, kCheckpointPhases.size());  // the progress bar's count
  // Each arrow is a barrier: no participant starts a phase before all finished the last.
  // (INSPECT runs twice: before validation, and again inside quiesce once quiesced.)
  EXPECT_THAT(job_.log()[0], ::testing::StartsWith("inspect "));
  EXPECT_THAT(job_.log()[1], ::testing::StartsWith("inspect "));
  const std::vector<std::string> order = {"quiesce", "save", "detach_multicast",
                                          "release", "native_lock", "native_checkpoint"};
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    EXPECT_TRUE(Before(order[i] + " ", order[i + 1] + " ")) << order[i] << " / " << order[i + 1];
  }
  EXPECT_THAT(job_.Only("native_lock"), ::testing::UnorderedElementsAre(
                                            "native_lock 100 timeout 250", "native_lock 200 timeout 250"));
  EXPECT_THAT(job_.Only("resume"), IsEmpty());
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(driver_.states[200], CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(PhaseNamed(report, "save").bytes, kMiB2);
  EXPECT_EQ(PhaseNamed(report, "save").participants, 2u);

  // The state file holds what the participants reported while quiesced.
  auto state = coord::ReadStateFile(dir_);
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_EQ(state->driver, "fake");
  ASSERT_EQ(state->participants.size(), 2u);
  EXPECT_EQ(state->participants[0].pid, 100);
  EXPECT_EQ(state->participants[0].start_time, kStart100);
  EXPECT_EQ(state->participants[0].saved_bytes, kMiB2);
  EXPECT_EQ(state->participants[1].records.size(), 2u);
  // The importer's GPUs: its access from device 1 only; the imported allocation's location
  // is the creator's GPU, which the importer may not see (the creator names it).
  ASSERT_EQ(state->participants[1].gpus.size(), 1u);
  EXPECT_EQ(state->participants[1].gpus[0].ordinal, 1);
  EXPECT_EQ(state->participants[1].gpus[0].uuid, "GPU-11111111-1111-1111-1111-111111111111");
  // The checkpoint's id: the one every shim was given in SAVE and holds now.
  EXPECT_FALSE(state->checkpoint_id.empty());
  EXPECT_EQ(processes_[0].checkpoint_id, state->checkpoint_id);
  EXPECT_EQ(processes_[1].checkpoint_id, state->checkpoint_id);
}

// A participant that reports its own device list (CUDA_VISIBLE_DEVICES="2,1": its device 1
// is the machine's GPU 1 only by chance of the list) has its GPUs named through that list,
// not through the coordinator's numbering.
TEST_F(SequenceTest, CheckpointNamesGpusThroughEachParticipantsOwnList) {
  const std::string gpu2 = "GPU-22222222-2222-2222-2222-222222222222";
  const std::string gpu9 = "GPU-99999999-9999-9999-9999-999999999999";
  processes_[1].device_uuids = gpu2 + "," + gpu9;
  const auto report = RunCheckpoint(250);
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  auto state = coord::ReadStateFile(dir_);
  ASSERT_TRUE(state.ok()) << state.error().message;
  ASSERT_EQ(state->participants[1].gpus.size(), 1u);
  EXPECT_EQ(state->participants[1].gpus[0], (coord::GpuRef{1, gpu9}));
}

TEST_F(SequenceTest, WorkInsideAPhaseRunsConcurrently) {
  FakeProcess third = processes_[1];
  third.pid = 300;
  third.start = 7000;
  third.records.clear();
  processes_.push_back(third);
  driver_.states[300] = CU_PROCESS_STATE_RUNNING;
  // SAVE completes only when all three participants are inside it at the same time.
  job_.RendezvousOn(proto::Op::kSave, 3);
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
}

TEST_F(SequenceTest, TopologyRefusalChangesNothing) {
  processes_[1].untracked_imports = 1;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("pid 200: 1 allocation is imported from a descriptor that is not a "
                          "cusnap ticket; release it or export it through a process started "
                          "with 'cusnap run'"));
  EXPECT_EQ(Names(report), (std::vector<std::string>{"discover", "inspect", "validate"}));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
  EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_RUNNING);
}

// A process the driver does not know gets no native calls, and the driver refuses it every
// time; a GetState that fails once at discovery is asked again. Taken for "no CUDA", it
// skipped the native restore of a checkpointed process, whose next driver call then waited
// for ever (the fault matrix's images-restore case that found it).
TEST_F(SequenceTest, AGetStateThatFailsOnceAtDiscoveryIsAskedAgain) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  ASSERT_EQ(driver_.states[200], CU_PROCESS_STATE_CHECKPOINTED);
  driver_.fail_get_state.insert(200);
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_EQ(Names(report), kRestorePhases);
  EXPECT_THAT(job_.Only("native_restore"), ::testing::Contains(::testing::StartsWith("native_restore 200")));
  EXPECT_EQ(driver_.states[200], CU_PROCESS_STATE_RUNNING);
}

// A GetState that fails every time is a process the driver does not know: no native calls.
TEST_F(SequenceTest, AGetStateThatAlwaysFailsMeansNoNativeCalls) {
  driver_.states.erase(200);  // the fake answers CUDA_ERROR_INVALID_VALUE, as the driver does
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  EXPECT_THAT(job_.Only("native_lock"), ::testing::ElementsAre(::testing::StartsWith("native_lock 100")));
}

// Resources are checked at validate, before quiesce: a participant's shortfall refuses with
// the shim's text whole (it names its process), nothing is quiesced, no state file.
TEST_F(SequenceTest, ResourceShortfallIsRefusedBeforeQuiesce) {
  const std::string shortfall =
      "pid 200: not enough resources for the checkpoint and its restore: descriptors "
      "(RLIMIT_NOFILE): 17 descriptors needed, 3 available (1 for the restore's imports + 16 "
      "spare); raise the limit or free some, then retry";
  processes_[1].fail[proto::Op::kCheckResources] = shortfall;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors, ElementsAre(shortfall));
  EXPECT_EQ(Names(report), (std::vector<std::string>{"discover", "inspect", "validate"}));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
  EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
}

// The state directory's filesystem (CUSNAP_TEST_STATE_DIR_FREE_BYTES standing in for statvfs)
// has less than the state file's estimate plus 1 MiB: refused before quiesce.
TEST_F(SequenceTest, FullStateDirectoryIsRefusedBeforeQuiesce) {
  ASSERT_EQ(::setenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES", "1048576", 1), 0);
  const auto report = RunCheckpoint();
  ::unsetenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES");
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("state directory " + dir_ + ": not enough disk space "
                                          "for the state file: "));
  EXPECT_THAT(report.errors[0], HasSubstr(" and 1048576 spare), 1048576 available; free some "
                                          "space or choose another --state-dir"));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
  EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
}

TEST_F(SequenceTest, QuiesceFailureResumesTheQuiescedParticipants) {
  processes_[1].fail[proto::Op::kQuiesce] = "pid 200: quiesce timed out waiting for a tracked call";
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: quiesce failed: quiesce timed out waiting "
                                         "for a tracked call"));
  // pid 100 quiesced and is resumed; pid 200 never quiesced and is left alone.
  EXPECT_THAT(job_.Only("resume"), ElementsAre("resume 100"));
  EXPECT_TRUE(Before("quiesce ", "resume "));
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_THAT(job_.Only("detach_multicast"), IsEmpty());
  EXPECT_THAT(job_.Only("native"), IsEmpty());
}

TEST_F(SequenceTest, TopologyChangedBeforeQuiesceIsRefusedAndResumed) {
  // The table seen while quiesced differs from the first INSPECT: the creator released
  // both handle and mapping in between. The second validation refuses; everyone resumes.
  struct Flip : coord::Participant {
    FakeParticipant inner;
    FakeProcess& process;
    int inspects = 0;
    Flip(FakeProcess& p, FakeJob& j) : inner(p, j), process(p) {}
    int pid() const override { return inner.pid(); }
    std::optional<uint64_t> start_time() const override { return inner.start_time(); }
    Result<proto::Message> Call(const proto::Message& h, int t) override {
      if (h.op == proto::Op::kInspect && ++inspects == 2) {
        process.records = {Allocation(Id(100, kStart100, 1), kMiB2, true, 0)};
      }
      return inner.Call(h, t);
    }
  };
  auto discover = [&](coord::CheckpointDriver&)
      -> Result<std::vector<std::unique_ptr<coord::Participant>>> {
    std::vector<std::unique_ptr<coord::Participant>> out;
    out.push_back(std::make_unique<Flip>(processes_[0], job_));
    out.push_back(std::make_unique<FakeParticipant>(processes_[1], job_));
    return out;
  };
  const auto report = coord::Checkpoint({dir_, 0, ""}, discover, driver_, observer_);
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("its creator released both its handle and its mappings"));
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_THAT(job_.Only("detach_multicast"), IsEmpty());
}

TEST_F(SequenceTest, UnwritableStateDirRefusesBeforeQuiesce) {
  const std::string scratch = dir_;  // TearDown removes it again
  dir_ = "/proc/self/cusnap-state";
  const auto report = RunCheckpoint();
  dir_ = scratch;
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("cannot create state directory /proc/self/cusnap-state"));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
}

TEST_F(SequenceTest, ShimNotActiveIsRefused) {
  processes_[1].phase = proto::ShimState::kReallocated;  // a restore stopped half way
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: its cusnap shim is reallocated, not active; "
                                         "only a running job can be checkpointed; a checkpoint "
                                         "or restore stopped half way: run 'cusnap recover "
                                         "--pid 200' to finish it"));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
}

// A job that is checkpointed already: the refusal says to restore it, naming the state
// directory when the one given records these very processes, and the target the user gave.
TEST_F(SequenceTest, CheckpointedJobIsRefusedWithTheRestoreCommand) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);  // both shims now RELEASED
  const size_t before = job_.log().size();
  target_ = "--pid 42";
  auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  const std::string tail = ", not active; only a running job can be checkpointed; it is "
                           "checkpointed: run 'cusnap restore --pid 42 --state-dir ";
  EXPECT_THAT(report.errors, ElementsAre("pid 100: its cusnap shim is released" + tail + dir_ + "'",
                                         "pid 200: its cusnap shim is released" + tail + dir_ + "'"));
  // A state directory that does not hold its checkpoint: the hint cannot name one.
  const std::string real_dir = dir_;
  dir_ = real_dir + "/elsewhere";
  target_.clear();
  report = RunCheckpoint();
  dir_ = real_dir;
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 2u);
  EXPECT_EQ(report.errors[0], "pid 100: its cusnap shim is released, not active; only a running "
                              "job can be checkpointed; it is checkpointed: run 'cusnap restore "
                              "--pid 100 --state-dir <the state directory of its checkpoint>'");
  EXPECT_FALSE(fs::exists(real_dir + "/elsewhere"));
  for (size_t i = before; i < job_.log().size(); ++i) {
    EXPECT_THAT(job_.log()[i], ::testing::StartsWith("inspect ")) << "nothing but reads";
  }
}

/// A state file in `dir` recording one process.
void WriteStateOf(const std::string& dir, int pid, uint64_t start_time) {
  coord::StateFile state;
  state.driver = "fake";
  coord::ParticipantState p;
  p.pid = pid;
  p.start_time = start_time;
  state.checkpoint_id = "5f000000-0000000000000001";
  state.participants.push_back(p);
  ASSERT_TRUE(coord::WriteStateFile(dir, state).ok());
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The state directory holds the checkpoint of another job whose process still exists (this
// test process, with its real start time): refused before anything changes, the file intact.
TEST_F(SequenceTest, StateDirOfAnotherLiveJobIsRefused) {
  const auto self_start = coord::ProcessStartTime(::getpid());
  ASSERT_TRUE(self_start.has_value());
  ASSERT_NO_FATAL_FAILURE(WriteStateOf(dir_, ::getpid(), *self_start));
  const std::string file = coord::StateFilePath(dir_);
  const std::string before = Slurp(file);
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("state directory " + dir_ + " holds the checkpoint of another job (pid " +
                          std::to_string(::getpid()) + ", still checkpointed or running); restore "
                          "it first if it is checkpointed, end it if it runs, or choose another "
                          "--state-dir"));
  EXPECT_EQ(Names(report), (std::vector<std::string>{"discover", "inspect", "validate"}));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
  EXPECT_EQ(Slurp(file), before);
}

// The other job's process is gone (same pid, another start time: not that process any more):
// its checkpoint can never be restored, so it is overwritten.
TEST_F(SequenceTest, StateDirOfAGoneJobIsOverwritten) {
  const auto self_start = coord::ProcessStartTime(::getpid());
  ASSERT_TRUE(self_start.has_value());
  ASSERT_NO_FATAL_FAILURE(WriteStateOf(dir_, ::getpid(), *self_start + 1));
  const auto report = RunCheckpoint();
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  auto state = coord::ReadStateFile(dir_);
  ASSERT_TRUE(state.ok()) << state.error().message;
  ASSERT_EQ(state->participants.size(), 2u);
  EXPECT_EQ(state->participants[0].pid, 100);
  EXPECT_EQ(state->participants[1].pid, 200);
}

// The state file of this very job (a second cycle) is overwritten; so is one where a process
// of this job is recorded beside one that is gone.
TEST_F(SequenceTest, StateDirOfTheSameJobIsOverwritten) {
  ASSERT_NO_FATAL_FAILURE(WriteStateOf(dir_, 100, kStart100));
  const auto report = RunCheckpoint();
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  auto state = coord::ReadStateFile(dir_);
  ASSERT_TRUE(state.ok()) << state.error().message;
  EXPECT_EQ(state->participants.size(), 2u);
}

// A state file that cannot be parsed is not destroyed: refused, named, left as it was.
TEST_F(SequenceTest, UnreadableStateFileInStateDirIsRefused) {
  const std::string file = coord::StateFilePath(dir_);
  std::ofstream(file) << "{]";
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("state directory " + dir_ + " already holds a state file that cannot "
                          "be read (" + file + ": corrupt state file (not valid JSON)); it is "
                          "not overwritten: move it away, or choose another --state-dir"));
  EXPECT_THAT(job_.Only("quiesce"), IsEmpty());
  EXPECT_EQ(Slurp(file), "{]");
}

// Phases the coordinator does alone are marked so (their lines show no participant count),
// and the multicast phases of a job without multicast objects say so.
TEST_F(SequenceTest, CoordinatorOnlyAndMulticastFreePhasesAreMarked) {
  const auto ck = RunCheckpoint();
  ASSERT_EQ(ck.outcome, coord::Outcome::kOk);
  const auto rs = RunRestore();
  ASSERT_EQ(rs.outcome, coord::Outcome::kOk) << ::testing::PrintToString(rs.errors);
  std::vector<std::string> local, multicast_free;
  for (const auto* report : {&ck, &rs}) {
    for (const auto& p : report->phases) {
      if (p.coordinator_only) local.push_back(p.name);
      if (p.note == "no multicast objects") multicast_free.push_back(p.name);
      EXPECT_EQ(p.participants, p.name == "read_state" ? 0u : 2u) << p.name;  // JSON unchanged
    }
  }
  EXPECT_EQ(local, (std::vector<std::string>{"write_state", "read_state"}));
  EXPECT_EQ(multicast_free,
            (std::vector<std::string>{"detach_multicast", "multicast_create", "multicast_import",
                                      "multicast_join", "multicast_bind"}));
}

TEST_F(SequenceTest, StaleEndpointIsRefused) {
  processes_[1].reported_start = 1;  // the socket answers for an older process of that pid
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_EQ(report.errors[0], "pid 200: its endpoint reports start time 1 but the process "
                              "started at 6000 (a stale endpoint of a reused pid?)");
}

TEST_F(SequenceTest, DiscoveryRefusalIsReported) {
  auto discover = [](coord::CheckpointDriver&)
      -> Result<std::vector<std::unique_ptr<coord::Participant>>> {
    return Error{-1, "pid 77 (python3): a CUDA process in the tree has no cusnap endpoint"};
  };
  const auto report = coord::Checkpoint({dir_, 0, ""}, discover, driver_, observer_);
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors, ElementsAre("pid 77 (python3): a CUDA process in the tree has no "
                                         "cusnap endpoint"));
}

TEST_F(SequenceTest, SaveFailureResumesEveryoneAndStops) {
  processes_[0].fail[proto::Op::kSave] = "pid 100: allocation 1: cuMemcpyDtoHAsync failed: 999";
  const auto report = RunCheckpoint();
  // SAVE only copies memory out: each shim resumes, and the job keeps running untouched.
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors, ElementsAre("pid 100: save failed: allocation 1: "
                                         "cuMemcpyDtoHAsync failed: 999"));
  EXPECT_EQ(Names(report).back(), "resume");
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_TRUE(Before("save ", "resume "));
  EXPECT_THAT(job_.Only("release"), IsEmpty());
  EXPECT_THAT(job_.Only("native"), IsEmpty());
  EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
}

// A detach that cannot be undone (pid 200 refuses to resume) and fails again when the
// checkpoint rolls the job forward: the checkpoint fails loudly, each shim keeping its state
// for 'cusnap recover'; nothing was released.
TEST_F(SequenceTest, DetachFailureThatCannotResumeIsLoud) {
  processes_[1].fail[proto::Op::kDetachMulticast] = "pid 200: multicast object 3 of pid 100: unbind failed";
  processes_[1].fail[proto::Op::kResume] = "pid 200: resume refused in phase SAVED";
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kFailedAfterChange);
  ASSERT_GE(report.errors.size(), 3u);
  EXPECT_EQ(report.errors[0], "pid 200: detach_multicast failed: multicast object 3 of pid 100: "
                              "unbind failed");
  EXPECT_EQ(report.errors[1], "pid 200: resume failed: resume refused in phase SAVED");
  EXPECT_THAT(report.errors, Contains(HasSubstr("run 'cusnap recover' again")));
  EXPECT_THAT(job_.Only("release"), IsEmpty());
  EXPECT_THAT(job_.Only("native"), IsEmpty());
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kSaved);
  // Written before the first destructive step, and kept: pid 200 could not resume.
  EXPECT_TRUE(fs::exists(coord::StateFilePath(dir_)));
}

// A detach that undid its own work: every shim resumes, and the state file of the checkpoint
// that did not happen is removed.
TEST_F(SequenceTest, DetachFailureThatResumesRemovesTheStateFile) {
  processes_[1].fail[proto::Op::kDetachMulticast] = "pid 200: multicast object 3 of pid 100: unbind failed";
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_TRUE(Before("write_state", "detach_multicast "));
  EXPECT_THAT(job_.Only("release"), IsEmpty());
  EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
}

// write_state fails after validation proved the directory writable (here: the directory is
// replaced by a file while the participants save): nothing was destroyed, so every
// participant resumes, the checkpoint is refused (exit 3) and no state file is left.
TEST_F(SequenceTest, WriteStateFailureResumesEveryone) {
  struct BreakDir : coord::Participant {
    FakeParticipant inner;
    std::string dir;
    BreakDir(FakeProcess& p, FakeJob& j, std::string d) : inner(p, j), dir(std::move(d)) {}
    int pid() const override { return inner.pid(); }
    std::optional<uint64_t> start_time() const override { return inner.start_time(); }
    Result<proto::Message> Call(const proto::Message& h, int t) override {
      if (h.op == proto::Op::kSave) {
        fs::remove_all(dir);
        std::ofstream(dir) << "not a directory";
      }
      return inner.Call(h, t);
    }
  };
  auto discover = [&](coord::CheckpointDriver&)
      -> Result<std::vector<std::unique_ptr<coord::Participant>>> {
    std::vector<std::unique_ptr<coord::Participant>> out;
    out.push_back(std::make_unique<BreakDir>(processes_[0], job_, dir_));
    out.push_back(std::make_unique<FakeParticipant>(processes_[1], job_));
    return out;
  };
  const auto report = coord::Checkpoint({dir_, 0, ""}, discover, driver_, observer_);
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("the state file could not be written: cannot create a "
                                          "file in " + dir_ + ": "));
  EXPECT_THAT(report.errors[0], HasSubstr("; nothing was released"));
  EXPECT_EQ(Names(report).back(), "resume");
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_THAT(job_.Only("detach_multicast"), IsEmpty());
  EXPECT_THAT(job_.Only("release"), IsEmpty());
  EXPECT_THAT(job_.Only("native"), IsEmpty());
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
  EXPECT_TRUE(processes_[0].checkpoint_id.empty());
}

// A release that fails once (after the point of no return): the checkpoint rolls the job
// forward from what each shim holds (pid 200's release again, then the restore's steps,
// verified against the state file): every participant ACTIVE, outcome kRolledForward.
TEST_F(SequenceTest, ReleaseFailureRollsTheJobForward) {
  processes_[1].fail[proto::Op::kRelease] = "pid 200: allocation 1 of pid 100: cuMemUnmap failed";
  processes_[1].fail_times = 1;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRolledForward)
      << ::testing::PrintToString(report.errors);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: release failed: allocation 1 of pid 100: "
                                         "cuMemUnmap failed"));
  EXPECT_THAT(report.notes, Contains("past the point of no return: rolling every participant "
                                     "forward"));
  EXPECT_THAT(job_.Only("resume"), IsEmpty());  // never pretend: released memory is gone
  EXPECT_THAT(job_.Only("release"),
              ::testing::UnorderedElementsAre("release 100", "release 200", "release 200"));
  EXPECT_THAT(job_.Only("native"), IsEmpty());
  EXPECT_THAT(Names(report), Contains("verify"));
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

TEST_F(SequenceTest, SaveByteCountMustMatchTheCreatedAllocations) {
  processes_[0].bytes[proto::Op::kSave] = kMiB2 - 4096;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);  // everyone resumed
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_THAT(report.errors, ElementsAre("pid 100: save copied 2093056 bytes, but the "
                                         "allocations it created hold 2097152 bytes"));
}

// The native lock fails for pid 200 after every shim released: the job is rolled forward
// (pid 100, locked, is unlocked; nobody needs a native restore) and runs again.
TEST_F(SequenceTest, LockFailureAfterReleaseRollsTheJobForward) {
  driver_.fail_lock.insert(200);
  const auto report = RunCheckpoint(10);
  EXPECT_EQ(report.outcome, coord::Outcome::kRolledForward)
      << ::testing::PrintToString(report.errors);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: cuCheckpointProcessLock failed: "
                                         "CUDA_ERROR_TIMEOUT (909)"));
  EXPECT_TRUE(fs::exists(coord::StateFilePath(dir_)));  // written before the lock
  EXPECT_THAT(job_.Only("native_checkpoint"), IsEmpty());
  EXPECT_THAT(job_.Only("native_restore"), IsEmpty());
  EXPECT_THAT(job_.Only("native_unlock"), ElementsAre("native_unlock 100"));
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

// Draining is bounded: a quiesce answered CUDA_ERROR_NOT_READY (work in flight) reopens every
// gate and is tried again; the second try succeeds and the checkpoint goes on.
TEST_F(SequenceTest, QuiesceWithWorkInFlightIsRetried) {
  processes_[1].fail[proto::Op::kQuiesce] = "pid 200: 1 call(s) still in flight";
  processes_[1].fail_code = CUDA_ERROR_NOT_READY;
  processes_[1].fail_times = 1;
  const auto report = RunCheckpoint();
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_THAT(report.errors, IsEmpty());
  EXPECT_EQ(job_.Only("quiesce").size(), 4u);
  EXPECT_THAT(job_.Only("resume"), ElementsAre("resume 100"));  // pid 100 had quiesced
}

// Work still in flight after every try: refused naming the process, everyone ACTIVE.
TEST_F(SequenceTest, QuiesceStillBusyAfterEveryTryIsRefusedByName) {
  processes_[1].fail[proto::Op::kQuiesce] = "pid 200: 1 call(s) still in flight";
  processes_[1].fail_code = CUDA_ERROR_NOT_READY;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("pid 200: device work still in flight after 3 quiesce attempts (pid "
                          "200: quiesce failed: 1 call(s) still in flight); every gate was "
                          "reopened"));
  EXPECT_EQ(job_.Only("quiesce").size(), 6u);
  EXPECT_THAT(job_.Only("save"), IsEmpty());
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

// recover before the point of no return (a command killed in save): every shim back to
// ACTIVE.
TEST_F(SequenceTest, RecoverRollsBackBeforeThePointOfNoReturn) {
  processes_[0].phase = proto::ShimState::kSaved;
  processes_[1].phase = proto::ShimState::kQuiesced;
  const auto report = coord::Recover({dir_, {}}, FakeDiscoverer(processes_, job_), driver_, observer_);
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_THAT(report.notes, Contains("before the point of no return: rolling every participant "
                                     "back"));
  EXPECT_THAT(job_.Only("resume"), ::testing::UnorderedElementsAre("resume 100", "resume 200"));
  EXPECT_THAT(job_.Only("release"), IsEmpty());
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

// A detach that fails on pid 200 after pid 100's detach took a team apart: pid 200 resumes,
// pid 100 cannot. The roll forward takes pid 200 through the whole cycle again (quiesce,
// save, detach, release) so that both are rebuilt together.
TEST_F(SequenceTest, RollForwardCyclesAParticipantThatResumed) {
  processes_[1].fail[proto::Op::kDetachMulticast] = "pid 200: cuMemRelease failed";
  processes_[1].fail_times = 1;
  processes_[0].fail[proto::Op::kResume] = "pid 100: RESUME refused in phase MULTICAST_DETACHED";
  processes_[0].fail_times = 1;
  const auto report = RunCheckpoint();
  EXPECT_EQ(report.outcome, coord::Outcome::kRolledForward)
      << ::testing::PrintToString(report.errors);
  EXPECT_THAT(job_.Only("quiesce"), ::testing::UnorderedElementsAre("quiesce 100", "quiesce 200",
                                                                    "quiesce 200"));
  EXPECT_THAT(job_.Only("release"), ::testing::UnorderedElementsAre("release 100", "release 200"));
  EXPECT_THAT(job_.Only("activate"),
              ::testing::UnorderedElementsAre("activate 100", "activate 200"));
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

// A restore whose import fails in one process only (the collective verdict: the restore
// stops there, pid 100 already imported, pid 200 still reallocated); restore again finishes,
// sending import only to pid 200.
TEST_F(SequenceTest, RestoreAgainFinishesAStepThatFailedInOneProcess) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  processes_[1].fail[proto::Op::kImport] = "pid 200: allocation 1 of pid 100: import failed";
  processes_[1].fail_times = 1;
  ASSERT_EQ(RunRestore().outcome, coord::Outcome::kFailedAfterChange);
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kImported);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kReallocated);
  const size_t before = job_.log().size();
  const auto report = RunRestore();
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_THAT(report.notes, Contains(HasSubstr("recovering it")));
  const auto log = job_.log();
  const std::vector<std::string> again(log.begin() + static_cast<long>(before), log.end());
  EXPECT_THAT(again, Contains("import 200"));
  EXPECT_THAT(again, ::testing::Not(Contains("import 100")));
  EXPECT_THAT(again, ::testing::Not(Contains(::testing::StartsWith("reallocate"))));
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
  EXPECT_EQ(processes_[1].phase, proto::ShimState::kActive);
}

TEST_F(SequenceTest, CheckpointThenRestoreRoundTrip) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  processes_[1].bytes[proto::Op::kReallocate] = 0;
  processes_[0].bytes[proto::Op::kReallocate] = kMiB2;
  const size_t before = job_.log().size();
  const auto report = RunRestore(*coord::ParseDeviceMap("0=1,1=0"));
  ASSERT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_EQ(Names(report), kRestorePhases);
  EXPECT_EQ(coord::kRestorePhaseCount, kRestorePhases.size());  // the progress bar's count
  EXPECT_EQ(PhaseNamed(report, "reallocate").bytes, kMiB2);
  // The device map reaches the driver by UUID.
  EXPECT_THAT(job_.Only("native_restore 100"),
              ElementsAre("native_restore 100 GPU-00000000-0000-0000-0000-000000000000="
                          "GPU-11111111-1111-1111-1111-111111111111 "
                          "GPU-11111111-1111-1111-1111-111111111111="
                          "GPU-00000000-0000-0000-0000-000000000000"));
  // The map goes to the native restore only: it keeps each process's ordinals (DRIVER-FACTS
  // F7), so the shims rebuild on their recorded ordinals and get no map.
  EXPECT_THAT(job_.Only("reallocate"), ::testing::UnorderedElementsAre("reallocate 100", "reallocate 200"));
  EXPECT_THAT(job_.Only("import 100"), ElementsAre("import 100"));
  const std::vector<std::string> order = {"native_restore", "native_unlock", "reallocate",
                                          "import",         "multicast_create", "multicast_import",
                                          "multicast_join", "multicast_bind", "inspect",
                                          "activate"};
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    EXPECT_TRUE(Before(order[i] + " ", order[i + 1] + " ", before)) << order[i] << " / " << order[i + 1];
  }
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(driver_.states[200], CU_PROCESS_STATE_RUNNING);
  EXPECT_EQ(processes_[0].phase, proto::ShimState::kActive);
}

TEST_F(SequenceTest, RestoreWithoutDeviceMapSendsNoMap) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  ASSERT_EQ(RunRestore().outcome, coord::Outcome::kOk);
  EXPECT_THAT(job_.Only("reallocate"), ::testing::UnorderedElementsAre("reallocate 100", "reallocate 200"));
  EXPECT_THAT(job_.Only("native_restore"), ::testing::UnorderedElementsAre("native_restore 100", "native_restore 200"));
}

TEST_F(SequenceTest, RestoreRefusesAMissingStateFile) {
  for (auto& p : processes_) p.phase = proto::ShimState::kReleased;
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors, ElementsAre("no checkpoint in " + dir_ + ": " + dir_ +
                                         "/cusnap-state.json does not exist"));
  EXPECT_THAT(job_.log(), IsEmpty());
}

TEST_F(SequenceTest, RestoreRefusesACorruptStateFile) {
  std::ofstream(coord::StateFilePath(dir_)) << "not json";
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors, ElementsAre(dir_ + "/cusnap-state.json: corrupt state file (not valid "
                                                "JSON); if the job was checkpointed with it, "
                                                "'cusnap recover' brings it back from what its "
                                                "processes hold, without the file"));
}

TEST_F(SequenceTest, RestoreRefusesAReusedPid) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  processes_[1].start = 9999;  // pid 200 now belongs to a newer process
  const size_t before = job_.log().size();
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("pid 200 is not the process that was checkpointed: it started at tick "
                          "9999, the checkpoint's pid 200 started at tick 6000 (pid reused)"));
  EXPECT_EQ(job_.log().size(), before);  // nothing sent, nothing restored
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_CHECKPOINTED);
}

TEST_F(SequenceTest, RestoreRefusesDifferentParticipants) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  // pid 100 is gone and pid 300, never checkpointed, is in the tree now.
  processes_[0].pid = 300;
  processes_[0].start = 7000;
  const size_t before = job_.log().size();
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors,
              ElementsAre("pid 300 is a participant now but is not in the checkpoint " + dir_ +
                              "/cusnap-state.json",
                          "pid 100 of the checkpoint is not a participant now (exited, or "
                          "outside the given process tree)"));
  EXPECT_EQ(job_.log().size(), before);
}

TEST_F(SequenceTest, RestoreRefusesAJobThatIsNotReleased) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  processes_[0].phase = proto::ShimState::kActive;
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors, ElementsAre("pid 100: its cusnap shim is active, not released; "
                                         "there is nothing to restore"));
}

// The state file was replaced by one of an earlier checkpoint of the same job: the shims
// hold another checkpoint's bytes, so restore refuses, naming both ids, and sends nothing.
TEST_F(SequenceTest, RestoreRefusesAStateFileOfAnotherCheckpoint) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  auto state = coord::ReadStateFile(dir_);
  ASSERT_TRUE(state.ok()) << state.error().message;
  const std::string current = state->checkpoint_id;
  state->checkpoint_id = "5f000000-00000000000000aa";  // cycle 1's file, put back
  ASSERT_TRUE(coord::WriteStateFile(dir_, *state).ok());
  const size_t before = job_.log().size();
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  const std::string tail = ", but " + dir_ + "/cusnap-state.json is checkpoint "
                           "5f000000-00000000000000aa (the state file was replaced, e.g. by an "
                           "older one); restore needs the state file of checkpoint " + current;
  EXPECT_THAT(report.errors,
              ElementsAre("pid 100: its cusnap shim holds checkpoint " + current + tail,
                          "pid 200: its cusnap shim holds checkpoint " + current + tail));
  EXPECT_EQ(job_.log().size(), before);  // nothing sent, nothing restored
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_CHECKPOINTED);
}

// An interrupt at each boundary before detach_multicast (the point of no return) stops the
// checkpoint there: every participant that quiesced resumes, a state file already written is
// removed, nothing is released, and the report says where it stopped.
TEST_F(SequenceTest, InterruptBeforeThePointOfNoReturnStopsAndResumes) {
  const std::vector<std::string> stoppable = {"discover", "inspect", "validate", "quiesce",
                                              "save", "write_state", "commit"};
  for (size_t k = 0; k < stoppable.size(); ++k) {
    SCOPED_TRACE("interrupted after " + stoppable[k]);
    coord::Interrupt interrupt;
    observer_ = RecordingObserver{};
    observer_.interrupt = &interrupt;
    observer_.interrupt_after = stoppable[k];
    for (auto& p : processes_) p.phase = proto::ShimState::kActive;
    const size_t before = job_.log().size();
    const auto report = coord::Checkpoint({dir_, 0, ""}, FakeDiscoverer(processes_, job_),
                                          driver_, observer_, &interrupt);
    EXPECT_EQ(observer_.answer, coord::Interrupt::Answer::kWillStop);
    EXPECT_EQ(report.outcome, coord::Outcome::kRefused);
    EXPECT_TRUE(report.interrupted);
    EXPECT_THAT(report.errors, ElementsAre("interrupted: stopped after phase '" + stoppable[k] +
                                           "', before anything was changed for good"));
    std::vector<std::string> ran(stoppable.begin(), stoppable.begin() + static_cast<long>(k) + 1);
    if (k >= 3) ran.push_back("resume");  // quiesced: put back
    EXPECT_EQ(Names(report), ran);
    const std::vector<std::string> log = job_.log();
    for (size_t i = before; i < log.size(); ++i) {
      const std::string& entry = log[i];
      EXPECT_THAT(entry, ::testing::Not(::testing::StartsWith("detach_multicast")));
      EXPECT_THAT(entry, ::testing::Not(::testing::StartsWith("release")));
      EXPECT_THAT(entry, ::testing::Not(::testing::StartsWith("native")));
    }
    for (const auto& p : processes_) EXPECT_EQ(p.phase, proto::ShimState::kActive) << p.pid;
    EXPECT_FALSE(fs::exists(coord::StateFilePath(dir_)));
  }
}

// From detach_multicast on, an interrupt no longer stops the checkpoint: it finishes.
TEST_F(SequenceTest, InterruptAfterThePointOfNoReturnFinishes) {
  for (const std::string after : {"detach_multicast", "release", "lock"}) {
    SCOPED_TRACE("interrupted after " + after);
    coord::Interrupt interrupt;
    observer_ = RecordingObserver{};
    observer_.interrupt = &interrupt;
    observer_.interrupt_after = after;
    for (auto& p : processes_) p.phase = proto::ShimState::kActive;
    for (auto& [pid, state] : driver_.states) state = CU_PROCESS_STATE_RUNNING;
    const auto report = coord::Checkpoint({dir_, 0, ""}, FakeDiscoverer(processes_, job_),
                                          driver_, observer_, &interrupt);
    EXPECT_EQ(observer_.answer, coord::Interrupt::Answer::kWillFinish);
    EXPECT_EQ(interrupt.Request(), coord::Interrupt::Answer::kAgain);  // a second one
    EXPECT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
    EXPECT_FALSE(report.interrupted);
    EXPECT_EQ(Names(report), kCheckpointPhases);
    fs::remove(coord::StateFilePath(dir_));
  }
}

// A restore stops at any boundary up to the native restore (the job stays checkpointed and
// restorable); from the native restore on it finishes.
TEST_F(SequenceTest, InterruptOfARestoreStopsBeforeTheNativeRestoreOnly) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  for (const std::string after : {"read_state", "discover", "match"}) {
    SCOPED_TRACE("interrupted after " + after);
    coord::Interrupt interrupt;
    observer_ = RecordingObserver{};
    observer_.interrupt = &interrupt;
    observer_.interrupt_after = after;
    const auto report = coord::Restore({dir_, {}}, FakeDiscoverer(processes_, job_), driver_,
                                       observer_, &interrupt);
    EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
    EXPECT_TRUE(report.interrupted);
    EXPECT_EQ(Names(report).back(), after);
    EXPECT_THAT(job_.Only("native_restore"), IsEmpty());
    for (const auto& p : processes_) EXPECT_EQ(p.phase, proto::ShimState::kReleased) << p.pid;
  }
  coord::Interrupt interrupt;
  observer_ = RecordingObserver{};
  observer_.interrupt = &interrupt;
  observer_.interrupt_after = "restore";
  const auto report = coord::Restore({dir_, {}}, FakeDiscoverer(processes_, job_), driver_,
                                     observer_, &interrupt);
  EXPECT_EQ(observer_.answer, coord::Interrupt::Answer::kWillFinish);
  EXPECT_EQ(report.outcome, coord::Outcome::kOk) << ::testing::PrintToString(report.errors);
  EXPECT_EQ(Names(report), kRestorePhases);
}

TEST_F(SequenceTest, RestoreRefusesABadDeviceMap) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  const auto report = RunRestore(*coord::ParseDeviceMap("0=5"));
  EXPECT_EQ(report.outcome, coord::Outcome::kRestoreRefused);
  EXPECT_THAT(report.errors, ElementsAre("device map names device 5, but the driver has 2 device(s)"));
  EXPECT_EQ(driver_.states[100], CU_PROCESS_STATE_CHECKPOINTED);
}

TEST(ShimStateNames, StatusShowsARestoredShimAsRestored) {
  EXPECT_EQ(coord::Lowercase(proto::ShimStateName(proto::ShimState::kRestored)), "restored");
  EXPECT_EQ(coord::Lowercase(proto::ShimStateName(proto::ShimState::kFailed)), "failed");
}

TEST_F(SequenceTest, RestoreWantsEveryShimRestoredAfterMulticastBind) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  // A shim that lets its application go on before the comparison is not restored.
  processes_[1].phase_after[proto::Op::kMulticastBind] = proto::ShimState::kActive;
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kFailedAfterChange);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: after multicast_bind its cusnap shim is "
                                         "active, not restored"));
  EXPECT_THAT(job_.Only("activate"), IsEmpty());
}

TEST_F(SequenceTest, RestoreVerifiesRecordForRecord) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  auto changed = processes_[1].records;
  changed[1].address += 0x200000;  // mapped back at another VA
  processes_[1].records_after_restore = changed;
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kFailedAfterChange);
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("pid 200: after restore the sharing table differs "
                                          "from the checkpoint (2 records, 2 recorded)"));
  EXPECT_THAT(report.errors[0], HasSubstr("recorded, now missing: "));
  EXPECT_THAT(report.errors[0], HasSubstr("\"0x7e0000000000\""));
  EXPECT_THAT(report.errors[0], HasSubstr("\"0x7e0000200000\""));
  EXPECT_THAT(job_.Only("activate"), IsEmpty());  // not reactivated on a mismatch
}

TEST_F(SequenceTest, RestoreStepFailureIsLoud) {
  ASSERT_EQ(RunCheckpoint().outcome, coord::Outcome::kOk);
  processes_[1].fail[proto::Op::kImport] = "pid 200: allocation 1 of pid 100: import failed";
  const auto report = RunRestore();
  EXPECT_EQ(report.outcome, coord::Outcome::kFailedAfterChange);
  EXPECT_THAT(report.errors, ElementsAre("pid 200: import failed: allocation 1 of pid 100: "
                                         "import failed"));
  EXPECT_EQ(Names(report).back(), "import");
  EXPECT_THAT(job_.Only("multicast_create"), IsEmpty());
}

// ---- Discovery over /proc and a control directory (real processes, fake driver) ----

class DiscoveryTest : public SequenceTest {
 protected:
  /// Forks a child that waits on a pipe; returns its pid.
  int SpawnChild() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    const int pid = ::fork();
    if (pid == 0) {
      char c;
      ::close(fds[1]);
      while (::read(fds[0], &c, 1) < 0) {
      }
      ::_exit(0);
    }
    ::close(fds[0]);
    release_fds_.push_back(fds[1]);
    children_.push_back(pid);
    return pid;
  }
  void TearDown() override {
    for (int fd : release_fds_) ::close(fd);  // children read EOF and exit
    for (int pid : children_) ::waitpid(pid, nullptr, 0);
    SequenceTest::TearDown();
  }
  std::vector<int> children_, release_fds_;
};

TEST_F(DiscoveryTest, CudaProcessWithoutEndpointIsRefused) {
  const int child = SpawnChild();
  driver_.states[child] = CU_PROCESS_STATE_RUNNING;  // the driver knows it: a CUDA process
  auto discover = coord::EndpointDiscoverer({dir_, ::getpid(), false});
  auto found = discover(driver_);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.error().message,
            "pid " + std::to_string(child) + " (" + coord::ProcessName(child) +
                "): a CUDA process in the tree of pid " + std::to_string(::getpid()) +
                " has no cusnap endpoint in " + dir_ + "; start it with 'cusnap run'");
}

TEST_F(DiscoveryTest, TreeWithoutEndpointsIsRefused) {
  SpawnChild();  // not a CUDA process: ignored
  auto found = coord::EndpointDiscoverer({dir_, ::getpid(), false})(driver_);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.error().message, "pid " + std::to_string(::getpid()) + ": no process in its "
                                   "tree has a cusnap endpoint in " + dir_ +
                                   "; start the job with 'cusnap run'");
}

TEST_F(DiscoveryTest, ProcessTreeListsChildren) {
  const int a = SpawnChild();
  const int b = SpawnChild();
  const auto tree = coord::ProcessTree(::getpid());
  ASSERT_FALSE(tree.empty());
  EXPECT_EQ(tree[0], ::getpid());
  EXPECT_THAT(tree, Contains(a));
  EXPECT_THAT(tree, Contains(b));
  EXPECT_TRUE(coord::ProcessTree(0x3fffffff).empty());
}

TEST(ProcessSession, TheLastNamespaceSessionIdIsTheOneTheProcessSees) {
  // /proc/<pid>/status of PID 1 of a nested namespace whose session leader is outside it.
  EXPECT_EQ(coord::LastNamespaceSessionId("Name:\tsleep\nNSpid:\t28395\t1\nNSsid:\t28395\t0\n"), 0);
  EXPECT_EQ(coord::LastNamespaceSessionId("NSsid:\t4242\nVmPeak:\t1 kB\n"), 4242);
  EXPECT_EQ(coord::LastNamespaceSessionId("Name:\tsleep\n"), std::nullopt);
  EXPECT_EQ(coord::OwnSessionId(::getpid()), ::getsid(0));
  EXPECT_EQ(coord::OwnSessionId(0x3fffffff), std::nullopt);
}

TEST(ProcessFiles, APidIsReadFromAFileNamedAfterItAndNothingElse) {
  EXPECT_EQ(coord::PidOfFileName("4121.sock", ".sock"), 4121);
  EXPECT_EQ(coord::PidOfFileName("4121.checkpoint", ".checkpoint"), 4121);
  EXPECT_EQ(coord::PidOfFileName("4121", ""), 4121);
  EXPECT_EQ(coord::PidOfFileName("999999999.sock", ".sock"), 999999999);
  for (const char* name : {".sock", "0.sock", "x.sock", "12a.sock", "1234567890.sock",
                           "4121.checkpoint.tmp", "4121.sock.lock", "-5.sock", "4121"}) {
    EXPECT_EQ(coord::PidOfFileName(name, ".sock"), std::nullopt) << name;
  }
}

TEST_F(DiscoveryTest, AllListsLiveEndpointsOnly) {
  const int child = SpawnChild();
  // Endpoint files: a live child, a dead pid, and names that are not endpoints.
  for (const std::string& name : std::vector<std::string>{std::to_string(child) + ".sock", "1073741800.sock", "x.sock", "12.txt"}) {
    std::ofstream(dir_ + "/" + name) << "";
  }
  EXPECT_EQ(coord::EndpointPids(dir_), std::vector<int>{child});
}

TEST_F(DiscoveryTest, StartTimeComesFromProc) {
  const auto self = coord::ProcessStartTime(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_GT(*self, 0u);
  EXPECT_EQ(coord::ProcessStartTime(::getpid()), self);
  EXPECT_FALSE(coord::ProcessStartTime(0x3fffffff).has_value());
}

}  // namespace
}  // namespace cusnap::testing

// ---- The phase runner itself ----

namespace cusnap::testing {
namespace {

TEST(PhaseRunner, SumsBytesAndReportsFailuresInIndexOrder) {
  const auto report = coord::RunPhase("save", 4, [](size_t i) -> Result<uint64_t> {
    if (i == 1) return Error{-1, "pid 11: allocation 3: copy failed"};
    if (i == 3) throw std::runtime_error("boom");
    return uint64_t{1000} * (i + 1);
  });
  EXPECT_EQ(report.name, "save");
  EXPECT_EQ(report.participants, 4u);
  EXPECT_EQ(report.bytes, 1000u + 3000u);
  EXPECT_THAT(report.errors, ElementsAre("pid 11: allocation 3: copy failed", "internal error: boom"));
  EXPECT_FALSE(report.ok());
  EXPECT_GE(report.elapsed_ms, 0.0);
}

TEST(PhaseRunner, NoParticipantsRunsNothing) {
  const auto report = coord::RunPhase("save", 0, [](size_t) -> Result<uint64_t> {
    ADD_FAILURE() << "work ran without participants";
    return uint64_t{0};
  });
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.participants, 0u);
}

TEST(PhaseRunner, EveryParticipantRunsAtOnceAndThePhaseWaitsForAll) {
  // Eight workers that each wait until all eight have started: only possible when they run
  // concurrently; RunPhase returns only after all of them finished (the barrier).
  FakeJob job;
  job.RendezvousOn(proto::Op::kSave, 8);
  std::atomic<int> finished{0};
  const auto report = coord::RunPhase("save", 8, [&](size_t) -> Result<uint64_t> {
    if (!job.Arrive(proto::Op::kSave)) return Error{-1, "not concurrent"};
    finished.fetch_add(1);
    return uint64_t{1};
  });
  EXPECT_TRUE(report.ok()) << ::testing::PrintToString(report.errors);
  EXPECT_EQ(finished.load(), 8);
  EXPECT_EQ(report.bytes, 8u);
}

}  // namespace
}  // namespace cusnap::testing
