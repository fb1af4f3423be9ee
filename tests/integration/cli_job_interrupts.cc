// SIGINT and SIGTERM of the real `cusnap checkpoint` and `cusnap restore` while a phase runs
// (SIMCUDA_DELAYS makes it long: in the CLI for the native calls and discovery, in the
// workers for the carrier's copies and the release's unmaps). Before the first destructive
// step the command stops at the next phase boundary, puts back what it did and exits
// 128 + the signal saying nothing was changed; after it, the command finishes, says so, and
// exits with its own result. Afterwards `status` names the state, and the job is running
// with every byte intact, or checkpointed and restorable.
#include <gmock/gmock.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

/// The worker's delays (ms per call): save copies and unmaps its staging mapping, release
/// unmaps, reallocate copies back. Long enough to be hit by a signal sent after the line of
/// the phase before.
constexpr const char* kWorkerDelays =
    "cuMemcpyDtoHAsync:700,cuMemcpyHtoDAsync:700,cuMemUnmap:700";

/// How long after the line of the phase before the signal goes: the next phase has surely
/// begun (its delay is longer), and the command has passed the boundary between them.
constexpr int kSettleMs = 150;

/// One case: the command, the phase whose line triggers the signal (the next one is running),
/// the CLI's delays that make that next phase long ("" when the workers' delays do), the
/// signal, and whether the command has passed its point of no return by then.
struct Interruption {
  const char* name;
  const char* command;  // "checkpoint" or "restore"
  const char* after;    // a line prefix: "driver: ", "quiesce ", ...
  const char* cli_delays;
  int signo;
  bool finishes;
};

void PrintTo(const Interruption& c, std::ostream* os) { *os << c.name; }

class CliJobInterrupt : public JobTest, public ::testing::WithParamInterface<Interruption> {
 protected:
  void TearDown() override {
    ::unsetenv("SIMCUDA_DELAYS");
    JobTest::TearDown();
  }

  void StartJob() {
    ::setenv("SIMCUDA_DELAYS", kWorkerDelays, 1);
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    ::unsetenv("SIMCUDA_DELAYS");
    ASSERT_NO_FATAL_FAILURE(Create(*creator_, "A", 2, "dev", 0));
    ASSERT_NO_FATAL_FAILURE(Map(*creator_, "a", "A", 0, 2, "0"));
    ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "a"));
    ASSERT_NO_FATAL_FAILURE(Share(*creator_, "A", *importer_));
    ASSERT_NO_FATAL_FAILURE(Map(*importer_, "ai", "A", 0, 2, "1"));
  }

  /// `command` with the case's CLI delays, signalled after the case's line.
  Ran Interrupted(const Interruption& c, const std::string& state) {
    std::vector<std::string> args = {c.command};
    args.insert(args.end(), target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    if (*c.cli_delays != '\0') ::setenv("SIMCUDA_DELAYS", c.cli_delays, 1);
    Ran r = CusnapSignalled(args, c.after, c.signo, kSettleMs);
    ::unsetenv("SIMCUDA_DELAYS");
    return r;
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
};

TEST_P(CliJobInterrupt, StopsAndPutsBackOrFinishes) {
  const Interruption& c = GetParam();
  const std::string signal = c.signo == SIGINT ? "SIGINT" : "SIGTERM";
  const std::string command = c.command;
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  const Snapshot before = command == "restore" ? Suspend(state) : Snap();
  ASSERT_FALSE(HasFatalFailure());

  const Ran r = Interrupted(c, state);
  if (!c.finishes) {
    EXPECT_EQ(r.status, 128 + c.signo) << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("cusnap " + command + ": interrupted (" + signal +
                                 "): nothing was changed for good yet; stopping at the next "
                                 "phase boundary"));
    EXPECT_THAT(r.err, HasSubstr("interrupted: stopped after phase '"));
    if (command == "checkpoint") {
      EXPECT_THAT(r.err, HasSubstr("cusnap checkpoint: interrupted (" + signal + "); nothing was "
                                   "changed, every participant was resumed: the job keeps running"));
      EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
      EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
      CheckEveryByte();
      CrossWrite(*creator_, "a", *importer_, "ai");
      EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
      Cycle(state);
    } else {
      EXPECT_THAT(r.err, HasSubstr("cusnap restore: interrupted (" + signal + "); nothing was "
                                   "changed, the job is still checkpointed: run 'cusnap restore' "
                                   "again to restore it"));
      ExpectSuspended();
      Resume(state, before);
    }
    return;
  }
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("cusnap " + command + ": interrupted (" + signal + ") after the "
                               "job was changed: finishing the " + command + " so that the job "
                               "is left whole; a second " + signal + " is ignored until it ends"));
  EXPECT_THAT(r.out, HasSubstr(command + ": done"));
  if (command == "checkpoint") {
    ExpectSuspended();
    Resume(state, before);
  } else {
    EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
    EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
    CheckEveryByte();
    CrossWrite(*creator_, "a", *importer_, "ai");
  }
}

// Two SIGINTs during the native lock: the first says the checkpoint finishes, the second is
// said to be ignored; the checkpoint finishes (exit 0) and the job restores.
TEST_F(CliJobInterrupt, SecondSigintWhileFinishingIsIgnored) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  const Snapshot before = Snap();
  ::setenv("SIMCUDA_DELAYS", "cuCheckpointProcessLock:1500", 1);
  const Ran r = CusnapSignalled({"checkpoint", "--pid", PidArg(), "--state-dir", state},
                                "release ", SIGINT, kSettleMs, 2);
  ::unsetenv("SIMCUDA_DELAYS");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("a second SIGINT is ignored until it ends"));
  EXPECT_THAT(r.err, HasSubstr("cusnap checkpoint: SIGINT ignored: the command is finishing"));
  ExpectSuspended();
  Resume(state, before);
}

// Every phase that a delay can make long enough to be hit. inspect, validate, write_state,
// read_state and match run in the coordinator alone and take no driver call; the boundaries
// around them are the same code (coordinator_sequence_test covers a stop at each).
INSTANTIATE_TEST_SUITE_P(
    Phases, CliJobInterrupt,
    ::testing::Values(
        Interruption{"checkpoint_discover", "checkpoint", "driver: ", "cuCheckpointProcessGetState:400", SIGINT, false},
        Interruption{"checkpoint_save", "checkpoint", "quiesce ", "", SIGINT, false},
        Interruption{"checkpoint_save_sigterm", "checkpoint", "quiesce ", "", SIGTERM, false},
        Interruption{"checkpoint_release", "checkpoint", "detach_multicast ", "", SIGINT, true},
        Interruption{"checkpoint_lock", "checkpoint", "release ", "cuCheckpointProcessLock:1500", SIGINT, true},
        Interruption{"checkpoint_checkpoint", "checkpoint", "lock ", "cuCheckpointProcessCheckpoint:1500", SIGINT, true},
        Interruption{"restore_discover", "restore", "read_state ", "cuCheckpointProcessGetState:400", SIGINT, false},
        Interruption{"restore_restore", "restore", "match ", "cuCheckpointProcessRestore:1500", SIGINT, true},
        Interruption{"restore_unlock", "restore", "restore ", "cuCheckpointProcessUnlock:1500", SIGINT, true},
        Interruption{"restore_reallocate", "restore", "unlock ", "", SIGINT, true}),
    [](const ::testing::TestParamInfo<Interruption>& param) { return std::string(param.param.name); });

}  // namespace
}  // namespace jobtest
