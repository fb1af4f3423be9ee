// What goes wrong around a plain `criu dump` / `criu restore` with libcusnap_criu.so, on
// criu_job (two processes sharing GPU memory, under `cusnap run`): a job cusnap refuses, and a
// participant killed at each of the plugin's hooks. Each leaves the job running as it was or
// restorable from its images, nothing lost but what a killed process held, the refusal or
// failure named in CRIU's log, and every command answering. A participant is killed where
// CUSNAP_TEST_PAUSE_AT stops the plugin (at a hook: "criu-plugin:<hook>:before", CRIU
// stopped) or the command it runs (at a phase of cusnap's sequence, cli/test_pause.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "cli_runner.h"
#include "criu_job_harness.h"
#include "criu_plugin_fixture.h"
#include "coordinator/images/manifest.h"
#include "coordinator/proc/processes.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class CriuPluginFaults : public CriuPlugin {
 protected:
  /// The pid criu_job's `role` ("root", "child") printed.
  int PidOf(const std::string& role) {
    const std::string text = ReadAll(log_), line = "PID " + role + " ";
    const size_t at = text.find(line);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + line.size());
  }

  /// Runs `command` (a CRIU run) with CUSNAP_TEST_PAUSE_AT=`pause`; once `log` (CRIU's log)
  /// shows the pause, SIGKILLs `victim` and continues what paused (CRIU itself, or the
  /// `cusnap criu-plugin` it runs). Returns what the command gave.
  Ran KilledAt(const std::string& pause, int victim, const std::string& log,
               const std::function<Ran()>& command) {
    ::setenv("CUSNAP_TEST_PAUSE_AT", pause.c_str(), 1);
    Ran ran;
    std::thread runner([&] { ran = command(); });
    const bool paused = AwaitInLog(log, "cusnap-test-pause: " + pause, 1);
    ::unsetenv("CUSNAP_TEST_PAUSE_AT");
    int stopped = 0;
    for (int i = 0; paused && stopped == 0 && i < 2000; ++i) {
      for (const int pid : coord::ProcessTree(::getpid())) {
        const std::string name = coord::ProcessName(pid);
        // CRIU ("criu", or "criu.real" behind a wrapper) or cusnap, never the job.
        const bool criu = name.rfind("criu", 0) == 0 && name != "criu_job";
        if (ProcState(pid) == 'T' && (criu || name == "cusnap")) stopped = pid;
      }
      if (stopped == 0) ::usleep(5'000);
    }
    EXPECT_TRUE(paused) << "no pause at " << pause << ": " << ReadAll(log);
    EXPECT_GT(stopped, 0) << "nothing stopped at " << pause;
    ::kill(victim, SIGKILL);
    while (ProcState(victim) != 'Z' && ::kill(victim, 0) == 0 && !coord::ProcessExited(victim)) {
      ::usleep(2'000);
    }
    if (stopped > 0) ::kill(stopped, SIGCONT);
    runner.join();
    return ran;
  }

  /// `cusnap status --pid root_` until `count` participants are active, within 30 s.
  void AwaitActive(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    Ran said;
    while (std::chrono::steady_clock::now() < deadline) {
      said = Cusnap({"status", "--pid", std::to_string(root_)});
      if (said.status == 0 && CountText(said.out, " active ") == count) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "not " << count << " participants active: " << said.out << said.err;
  }

  /// The root alone is left (its child was killed): it is active again, answers, and still
  /// has its bytes (its check passes; its peer is gone).
  void ExpectRootRunsOnWithItsBytes() {
    const Ran status = Cusnap({"status", "--pid", std::to_string(root_)});
    EXPECT_EQ(status.status, 0) << status.out << status.err;
    EXPECT_EQ(CountText(status.out, " active "), 1u) << status.out << status.err;
    WriteAll(job_dir_ + "/go", "");
    EXPECT_TRUE(AwaitInLog(log_, "CHECKED root 4194304", 1)) << ReadAll(log_);
    EXPECT_THAT(ReadAll(log_), Not(HasSubstr("LOST root")));
  }
};

// A job cusnap refuses to checkpoint (the child holds an import of a raw CUDA descriptor, not
// a cusnap ticket): CRIU's dump fails in the plugin's init with cusnap's refusal in its log,
// before anything changed; the job runs on with every byte, its untracked import too.
TEST_F(CriuPluginFaults, AJobCusnapRefusesFailsTheDumpByNameAndRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ::setenv("CRIU_JOB_UNTRACKED", "1", 1);
  StartJob();
  ::unsetenv("CRIU_JOB_UNTRACKED");
  ASSERT_GT(root_, 0);
  const Ran dump = Dump("images");
  EXPECT_NE(dump.status, 0);
  const std::string log = Log("images", "dump");
  EXPECT_THAT(log, HasSubstr("pid " + std::to_string(PidOf("child")) + ": an allocation "));
  EXPECT_THAT(log, HasSubstr("was imported from a descriptor that is not a cusnap ticket"));
  EXPECT_THAT(log, HasSubstr("refused; nothing was changed"));
  EXPECT_THAT(log, HasSubstr("Failed in init(0) of \"cusnap_criu\""));
  EXPECT_FALSE(coord::HasPendingManifest(dir_ + "/images"));
  const Ran status = Cusnap({"status", "--pid", std::to_string(root_)});
  EXPECT_EQ(CountText(status.out, " active "), 2u) << status.out << status.err;
  ExpectEveryByteOnceTold(job_dir_, log_, "12582912");
}

// The child killed while the plugin's checkpoint runs, before the point of no return
// (quiesce) and after it (release): the dump fails naming the lost process, and the root is
// rolled back (or forward) in place, active with its bytes.
class CriuPluginKilledInTheCheckpoint : public CriuPluginFaults,
                                       public ::testing::WithParamInterface<const char*> {};

TEST_P(CriuPluginKilledInTheCheckpoint, FailsTheDumpAndTheRootRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran dump = KilledAt(std::string("dump:") + GetParam(), PidOf("child"),
                            dir_ + "/images/dump.log", [&] { return Dump("images"); });
  EXPECT_NE(dump.status, 0);
  const std::string log = Log("images", "dump");
  EXPECT_THAT(log, HasSubstr("Error: cusnap_criu: cusnap criu-plugin dump failed"));
  EXPECT_THAT(log, HasSubstr("pid " + std::to_string(PidOf("child"))));
  ASSERT_NO_FATAL_FAILURE(AwaitActive(1));
  ExpectRootRunsOnWithItsBytes();
}

INSTANTIATE_TEST_SUITE_P(Phases, CriuPluginKilledInTheCheckpoint,
                         ::testing::Values("quiesce:before", "release:before"));

// The child killed once the plugin's checkpoint is done, at CRIU's first PAUSE_DEVICES (the
// root's, before CRIU seizes the tree): the plugin fails the dump at the child's own
// PAUSE_DEVICES (CRIU would take its zombie as it is), naming it; the root is restored in
// place once CRIU ended, with its bytes.
TEST_F(CriuPluginFaults, AChildKilledAtPauseDevicesFailsTheDumpAndTheRootRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const int child = PidOf("child");
  const Ran dump = KilledAt("criu-plugin:pause-devices:before", child, dir_ + "/images/dump.log",
                            [&] { return Dump("images"); });
  EXPECT_NE(dump.status, 0);
  const std::string log = Log("images", "dump");
  EXPECT_THAT(log, HasSubstr("cusnap_criu: pid " + std::to_string(child) + " (pid " +
                             std::to_string(child) + " of the job), a cusnap participant, exited "
                             "after cusnap checkpointed the job: the dump fails"));
  EXPECT_THAT(log, HasSubstr("dump-end: CRIU failed"));
  EXPECT_FALSE(coord::HasManifest(dir_ + "/images"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive(1));
  ExpectRootRunsOnWithItsBytes();
}

// The root killed at its PAUSE_DEVICES (a zombie nobody reaps yet): CRIU cannot dump the
// tree; the child, released for the dump, is not stranded: the watch restores it in place
// (`cusnap restore --pid <child>`) once CRIU ended, with its own allocation; the root's, which
// it imported, went with the root (named).
TEST_F(CriuPluginFaults, TheRootKilledAtPauseDevicesFailsTheDumpAndTheChildRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const int child = PidOf("child");
  const Ran dump = KilledAt("criu-plugin:pause-devices:before", root_, dir_ + "/images/dump.log",
                            [&] { return Dump("images"); });
  EXPECT_NE(dump.status, 0);
  EXPECT_THAT(Log("images", "dump"), HasSubstr("cusnap_criu: pid " + std::to_string(root_) +
                                               " (pid " + std::to_string(root_) + " of the job), "
                                               "a cusnap participant, exited"));
  root_ = child;  // what runs of the job now
  ASSERT_NO_FATAL_FAILURE(AwaitActive(1));
  WriteAll(job_dir_ + "/go", "");
  EXPECT_TRUE(AwaitInLog(log_, "FAIL child", 1)) << ReadAll(log_);
  const std::string text = ReadAll(log_);
  EXPECT_THAT(text, HasSubstr("LOST child 1 "));  // the root's allocation, unmapped
  EXPECT_THAT(text, Not(HasSubstr("LOST child 2")));
}

// The child killed at the dump's exit, after CRIU wrote every image (the tasks still seized):
// the images hold the whole job, and restore it with every byte.
TEST_F(CriuPluginFaults, AChildKilledAtDumpEndLeavesImagesOfTheWholeJob) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran dump = KilledAt("criu-plugin:dump-end:before", PidOf("child"),
                            dir_ + "/images/dump.log", [&] { return Dump("images"); });
  ASSERT_EQ(dump.status, 0) << dump.err << Log("images", "dump");
  EXPECT_THAT(Log("images", "dump"), HasSubstr("dump-end: the manifest lists every image file"));
  ASSERT_NO_FATAL_FAILURE(AwaitJobGone());
  RestoreWithEveryByte("images");
}

// The restored child killed at RESUME_DEVICES_LATE (restored, still stopped by CRIU): CRIU
// fails the restore and kills what it restored, named in its log; the images are untouched and
// restore the whole job with every byte.
TEST_F(CriuPluginFaults, AChildKilledAtResumeDevicesLateFailsTheRestoreAndTheImagesRestoreAgain) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const int child = PidOf("child");
  ASSERT_NO_FATAL_FAILURE(DumpAndAwaitGone("images"));
  const Ran failed = KilledAt("criu-plugin:resume-devices-late:before", child,
                              dir_ + "/images/restore.log", [&] { return Restore("images"); });
  EXPECT_NE(failed.status, 0);
  EXPECT_THAT(Log("images", "restore"), HasSubstr("Restoring FAILED"));
  ASSERT_NO_FATAL_FAILURE(AwaitJobGone());
  RestoreWithEveryByte("images");
}

// The restored child killed at the restore's exit, before cusnap's restore phases: the root is
// rolled forward without it (its own memory went with it, named), active with its bytes.
TEST_F(CriuPluginFaults, AChildKilledAtRestoreEndLeavesTheRootRestored) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const int child = PidOf("child");
  ASSERT_NO_FATAL_FAILURE(DumpAndAwaitGone("images"));
  const Ran restore = KilledAt("criu-plugin:restore-end:before", child,
                               dir_ + "/images/restore.log", [&] { return Restore("images"); });
  EXPECT_EQ(restore.status, 0) << restore.err;
  EXPECT_THAT(Log("images", "restore"),
              HasSubstr("the job runs without what it lost: pid " + std::to_string(child) +
                        "'s own memory (it exited)"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive(1));
  ExpectRootRunsOnWithItsBytes();
}

}  // namespace
}  // namespace cusnap::testing
