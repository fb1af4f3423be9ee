// Never strand a job, through the real `cusnap` (simulated driver, job_worker
// processes through `cusnap run`): a `cusnap checkpoint` or `cusnap restore` killed with
// SIGKILL at a stage (SIMCUDA_DELAYS makes the stage long), then `cusnap status` naming the
// state and one `cusnap recover` gives back a running job with every byte intact; a command
// killed before its point of no return lets go of the job by itself when its lease runs
// out; a participant killed during save, or after the checkpoint, is named and its
// survivors come back; an import (or a re-export) failing in one process only fails the
// restore, and running `cusnap restore` again finishes it.
#include <gmock/gmock.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

/// The workers' delays (ms per call): save's copies, release's unmaps, reallocate's copies.
constexpr const char* kWorkerDelays =
    "cuMemcpyDtoHAsync:700,cuMemcpyHtoDAsync:700,cuMemUnmap:700";

class CliJobRecover : public JobTest {
 protected:
  void TearDown() override {
    ::unsetenv("SIMCUDA_DELAYS");
    ::unsetenv("SIMCUDA_FAULTS");
    ::unsetenv("CUSNAP_LEASE_MS");
    JobTest::TearDown();
  }

  /// A creator of A (device 0) sharing it with an importer (device 1) that creates B and
  /// shares it back: each process holds memory of its own and memory of the other.
  /// `delays` go to both workers (SIMCUDA_DELAYS), `importer_faults` to the importer only.
  void StartJob(const char* delays, const char* importer_faults = "") {
    if (*delays != '\0') ::setenv("SIMCUDA_DELAYS", delays, 1);
    creator_ = &Start("creator", 0);
    if (*importer_faults != '\0') ::setenv("SIMCUDA_FAULTS", importer_faults, 1);
    importer_ = &Start("importer", 1);
    ::unsetenv("SIMCUDA_DELAYS");
    ::unsetenv("SIMCUDA_FAULTS");
    ASSERT_NO_FATAL_FAILURE(Create(*creator_, "A", 2, "dev", 0));
    ASSERT_NO_FATAL_FAILURE(Map(*creator_, "a", "A", 0, 2, "0"));
    ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "a"));
    ASSERT_NO_FATAL_FAILURE(Share(*creator_, "A", *importer_));
    ASSERT_NO_FATAL_FAILURE(Map(*importer_, "ai", "A", 0, 2, "1"));
    ASSERT_NO_FATAL_FAILURE(Create(*importer_, "B", 2, "dev", 1));
    ASSERT_NO_FATAL_FAILURE(Map(*importer_, "b", "B", 0, 2, "1"));
    ASSERT_NO_FATAL_FAILURE(Fill(*importer_, "b"));
    ASSERT_NO_FATAL_FAILURE(Share(*importer_, "B", *creator_));
    ASSERT_NO_FATAL_FAILURE(Map(*creator_, "bi", "B", 0, 2, "0"));
  }

  /// `cusnap <command> <target> --state-dir <state>`, SIGKILLed once its stdout has a line
  /// starting with `after` (and kSettleMs more: the next stage runs).
  Ran Killed(const char* command, const std::string& after, const std::string& state) {
    std::vector<std::string> args = {command};
    args.insert(args.end(), target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    return CusnapSignalled(args, after, SIGKILL, kSettleMs);
  }

  Ran Recover(const std::string& state) {
    std::vector<std::string> args = {"recover"};
    args.insert(args.end(), target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    return Cusnap(args);
  }

  /// The job runs as before: every shim ACTIVE, every byte intact, writes still cross, and
  /// the next full cycle works.
  void ExpectRunningWhole(const std::string& state) {
    EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
    EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
    CheckEveryByte();
    CrossWrite(*creator_, "a", *importer_, "ai");
    CrossWrite(*importer_, "b", *creator_, "bi");
    Cycle(state);
  }

  static constexpr int kSettleMs = 150;
  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
};

/// One SIGKILL of the CLI: the command, the line after which it goes, the CLI's delays that
/// make the next stage long ("" when the workers' delays do), and the states `status` may
/// show afterwards (a killed command leaves each process where it was).
struct Kill9 {
  const char* name;
  const char* command;
  const char* after;
  const char* cli_delays;
  std::vector<std::string> states;
};

void PrintTo(const Kill9& c, std::ostream* os) { *os << c.name; }

class CliJobKill9 : public CliJobRecover, public ::testing::WithParamInterface<Kill9> {};

TEST_P(CliJobKill9, StatusNamesTheStateAndRecoverBringsTheJobBack) {
  const Kill9& c = GetParam();
  ASSERT_NO_FATAL_FAILURE(StartJob(kWorkerDelays));
  const std::string state = dir_ + "/state";
  if (std::string(c.command) == "restore") {
    (void)Suspend(state);
    ASSERT_FALSE(HasFatalFailure());
  }
  if (*c.cli_delays != '\0') ::setenv("SIMCUDA_DELAYS", c.cli_delays, 1);
  // The killed command's lease outlives the test: this test asks what `recover` does. With
  // the default 10 s lease a slow machine (CI under AddressSanitizer) let the shims roll
  // back by themselves first (LeaseThatRunsOutRollsTheJobBackByItself covers that path).
  ::setenv("CUSNAP_LEASE_MS", "600000", 1);
  const Ran killed = Killed(c.command, c.after, state);
  ::unsetenv("CUSNAP_LEASE_MS");
  ::unsetenv("SIMCUDA_DELAYS");
  EXPECT_EQ(killed.status, -1) << killed.out << killed.err;

  // The shims finish the step they were given, then wait: status names where each stands.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (const std::string& phase : Phases()) {
    EXPECT_NE(std::find(c.states.begin(), c.states.end(), phase), c.states.end())
        << c.name << ": status shows " << phase;
  }

  const Ran rc = Recover(state);
  EXPECT_EQ(rc.status, 0) << rc.out << rc.err;
  EXPECT_THAT(rc.out, HasSubstr("recover: done"));
  EXPECT_THAT(rc.err, AnyOf(HasSubstr("rolling every participant forward"),
                            HasSubstr("rolling every participant back")));
  if (rc.err.find("rolling every participant forward") != std::string::npos) {
    // The job has no multicast object: recover's multicast phases say so, as restore's do
    // (not "2 participants").
    EXPECT_THAT(rc.out, ::testing::ContainsRegex("multicast_bind +[0-9.]+ ms  \\(no multicast objects\\)"));
  }
  ExpectRunningWhole(state);
}

INSTANTIATE_TEST_SUITE_P(
    Stages, CliJobKill9,
    ::testing::Values(
        // save runs (before the point of no return): rolled back
        Kill9{"checkpoint_save", "checkpoint", "quiesce ", "", {"quiesced", "saved"}},
        // release runs (after it): rolled forward from what each shim holds
        Kill9{"checkpoint_release", "checkpoint", "detach_multicast ", "",
              {"multicast_detached", "released"}},
        // the native lock runs: every shim released, the processes running or locked
        Kill9{"checkpoint_lock", "checkpoint", "release ", "cuCheckpointProcessLock:1500",
              {"released"}},
        // the native checkpoint runs
        Kill9{"checkpoint_checkpoint", "checkpoint", "lock ",
              "cuCheckpointProcessCheckpoint:1500", {"released"}},
        // restore's reallocate runs: some shims reallocated, some still released
        Kill9{"restore_reallocate", "restore", "unlock ", "", {"released", "reallocated"}}),
    [](const ::testing::TestParamInfo<Kill9>& param) { return std::string(param.param.name); });

// SIGKILL of the checkpoint during save, before its point of no return: nobody runs
// recover, and the shims let go by themselves once the lease runs out (CUSNAP_LEASE_MS):
// ACTIVE, bytes intact, the application's calls go on.
TEST_F(CliJobRecover, LeaseThatRunsOutRollsTheJobBackByItself) {
  ASSERT_NO_FATAL_FAILURE(StartJob(kWorkerDelays));
  const std::string state = dir_ + "/state";
  ::setenv("CUSNAP_LEASE_MS", "400", 1);
  const Ran killed = Killed("checkpoint", "quiesce ", state);
  ::unsetenv("CUSNAP_LEASE_MS");
  EXPECT_EQ(killed.status, -1) << killed.out << killed.err;
  std::vector<std::string> phases;
  for (int i = 0; i < 100; ++i) {
    phases = Phases();
    if (phases == std::vector<std::string>(LiveParticipants(), "active")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(phases, std::vector<std::string>(LiveParticipants(), "active"));
  const Ran st = Cusnap({"status", "--all"});
  EXPECT_THAT(st.out, HasSubstr("(its lease expired) in phase "));
  EXPECT_THAT(st.out, HasSubstr("rolled back by itself to ACTIVE"));
  ExpectRunningWhole(state);
}

// `cusnap recover` on a running job changes nothing and says so.
TEST_F(CliJobRecover, RecoverOfARunningJobChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartJob(""));
  const std::string state = dir_ + "/state";
  const Ran rc = Recover(state);
  EXPECT_EQ(rc.status, 0) << rc.out << rc.err;
  EXPECT_THAT(rc.err, HasSubstr("every participant is active: nothing to recover"));
  EXPECT_THAT(rc.out, HasSubstr("recover: done\n"));
  EXPECT_THAT(rc.out, Not(HasSubstr("state file")));  // none was used
  ExpectRunningWhole(state);
}

// The creator is killed while the checkpoint saves (before the point of no return): the
// checkpoint is refused naming it, the importer resumes with its own bytes.
TEST_F(CliJobRecover, ParticipantKilledDuringSaveIsNamedAndTheSurvivorResumes) {
  // Save's copies take 3 s each: the kill lands in save (discovery to quiesce takes far less).
  ASSERT_NO_FATAL_FAILURE(StartJob("cuMemcpyDtoHAsync:3000"));
  const std::string state = dir_ + "/state";
  const int creator_pid = creator_->pid;
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    Kill(*creator_);
  });
  const Ran ck = Checkpoint(state);
  killer.join();
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("pid " + std::to_string(creator_pid) + " exited during the command"));
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  EXPECT_EQ(Ask(*importer_, "check b " + std::to_string(seeds_.at("B"))), "ok");
  EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
}

// The creator of A is killed after the checkpoint: `restore --all` restores the importer
// without it, naming A (its creator, the importer's VA range left unmapped); B, which the
// importer created, comes back whole.
TEST_F(CliJobRecover, ParticipantKilledAfterTheCheckpointDoesNotBlockRestore) {
  ASSERT_NO_FATAL_FAILURE(StartJob(""));
  const std::string state = dir_ + "/state";
  (void)Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const int creator_pid = creator_->pid;
  Kill(*creator_);
  const Ran rs = Cusnap({"restore", "--all", "--state-dir", state});
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("pid " + std::to_string(creator_pid) + " of the job exited"));
  EXPECT_THAT(rs.err, HasSubstr("created by pid " + std::to_string(creator_pid) +
                                " (exited), cannot come back: pid " +
                                std::to_string(importer_->pid) + "'s mappings of it stay "
                                "unmapped: [0x"));
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  EXPECT_EQ(Ask(*importer_, "check b " + std::to_string(seeds_.at("B"))), "ok");
}

// The importer's import fails at restore (its second cuMemImportFromShareableHandle: the
// first was at setup); the creator went on. The restore fails (exit 4), status names where
// each process stands and why, and `cusnap restore` again finishes the job.
TEST_F(CliJobRecover, ImportFailingInOneProcessIsFinishedByRestoringAgain) {
  ASSERT_NO_FATAL_FAILURE(StartJob("", "cuMemImportFromShareableHandle:2:2"));
  const std::string state = dir_ + "/state";
  (void)Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const Ran rs = Restore(state);
  EXPECT_EQ(rs.status, 4) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_THAT(rs.err, HasSubstr("'cusnap recover --pid"));
  const Ran st = Cusnap({"status", "--all"});
  EXPECT_THAT(st.out, HasSubstr("IMPORT failed; the shim stays REALLOCATED and the step can be "
                                "run again ('cusnap recover')"));
  const Ran again = Restore(state);
  EXPECT_EQ(again.status, 0) << again.out << again.err;
  EXPECT_THAT(again.err, HasSubstr("recovering it"));
  // Said between the restore's phase lines and recover's, whose names repeat.
  EXPECT_THAT(again.out, ::testing::ContainsRegex("\nmatch [^\n]*\n-- the job is not "
                                                  "checkpointed as a whole [^\n]*recovering it "
                                                  "\\(the phases of 'cusnap recover' follow\\)"
                                                  "\ndiscover "));
  ExpectRunningWhole(state);
}

// The importer's re-export of B fails at restore (its second cuMemExportToShareableHandle:
// the first made B's ticket at setup): its reallocate fails after B was rebuilt, before the
// creator could import it. Restore again exports it, the creator imports it, every byte is
// there.
TEST_F(CliJobRecover, ReexportFailureLeavesTheImportersAbleToRetry) {
  ASSERT_NO_FATAL_FAILURE(StartJob("", "cuMemExportToShareableHandle:2:2"));
  const std::string state = dir_ + "/state";
  (void)Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const Ran rs = Restore(state);
  EXPECT_EQ(rs.status, 4) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("reallocate failed: "));
  EXPECT_THAT(rs.err, HasSubstr("exporting allocation"));
  const Ran again = Restore(state);
  EXPECT_EQ(again.status, 0) << again.out << again.err;
  ExpectRunningWhole(state);
}

// A multicast team of a creator (device 0) and an importer (device 1), each binding memory
// of its own; the creator maps the team. One member is killed after the checkpoint: the
// survivor is recovered without the team, which is named (object, creator, the dead member,
// the survivor's multicast VA ranges left unmapped), with its own bytes intact, and a
// further checkpoint and restore of it is not refused.
class CliJobRecoverMulticast : public JobTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CliJobRecoverMulticast, TeamThatLostAMemberIsNamedAndNotRebuilt) {
  const bool creator_dies = GetParam();
  Worker& creator = Start("creator", 0);
  Worker& member = Start("member", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "X", 2, "dev", 0, "x", "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(member, "Y", 2, "dev", 1, "y", "1"));
  ASSERT_NO_FATAL_FAILURE(MulticastTeam(creator, member, "M", "X", "Y"));
  const std::string mc_va = OkValue(Ask(creator, "map m_in_creator M 0 2 0"));
  ASSERT_EQ(mc_va.rfind("0x", 0), 0u);
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  Worker& dead = creator_dies ? creator : member;
  Worker& survivor = creator_dies ? member : creator;
  const std::string creator_pid = std::to_string(creator.pid);
  const std::string dead_pid = std::to_string(dead.pid);
  const std::string survivor_pid = std::to_string(survivor.pid);
  Kill(dead);
  const Ran rec = Cusnap({"recover", "--all", "--state-dir", state});
  EXPECT_EQ(rec.status, 0) << rec.out << rec.err;
  // Checkpointed in place: the carriers never left memory, and read_carriers says so (it
  // said "1 participant" and moved nothing).
  EXPECT_THAT(rec.out, ::testing::ContainsRegex("\nread_carriers +[0-9.]+ ms  \\(no carrier on file\\)\n"));
  EXPECT_THAT(rec.err, HasSubstr("multicast object 1 of pid " + creator_pid));
  EXPECT_THAT(rec.err, HasSubstr(", created by pid " + creator_pid + ": its team lost pid " + dead_pid +
                                 " (exited), it is not rebuilt; pid " + survivor_pid +
                                 "'s multicast mappings of it stay unmapped: "));
  // Only the creator mapped the team.
  EXPECT_THAT(rec.err, HasSubstr("'s multicast mappings of it stay unmapped: " +
                                 std::string(creator_dies ? "none" : "[" + mc_va)));
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  const std::string own = creator_dies ? "check y " + std::to_string(seeds_.at("Y"))
                                       : "check x " + std::to_string(seeds_.at("X"));
  EXPECT_EQ(Ask(survivor, own), "ok");
  // The dropped team does not stand in the way of the next checkpoint.
  const std::string again = dir_ + "/again";
  const Ran ck = Checkpoint(again);
  EXPECT_EQ(ck.status, 0) << ck.out << ck.err;
  const Ran rs = Restore(again);
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  EXPECT_EQ(Ask(survivor, own), "ok");
}

INSTANTIATE_TEST_SUITE_P(Member, CliJobRecoverMulticast, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "CreatorDies" : "ImporterDies"; });

}  // namespace
}  // namespace jobtest
