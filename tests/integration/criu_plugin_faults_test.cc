// What goes wrong around a plain `criu dump` / `criu restore` with libcusnap_criu.so, on
// criu_job (two processes sharing GPU memory, under `cusnap run`): a job cusnap refuses, a
// participant killed at each of the plugin's hooks, and a driver error at each step of
// cusnap's sequences that calls the driver in the job's processes (the native steps, which
// the command itself calls, are criu_plugin_test.cc's). Each leaves the job running as it was or
// restorable from its images, nothing lost but what a killed process held, the refusal or
// failure named in CRIU's log, and every command answering. A participant is killed where
// CUSNAP_TEST_PAUSE_AT stops the plugin (at a hook: "criu-plugin:<hook>:before", CRIU
// stopped) or the command it runs (at a phase of cusnap's sequence, cli/test_pause.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

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

  /// What paused in our tree (CRIU itself, "criu" or "criu.real" behind a wrapper, or the
  /// `cusnap criu-plugin` it runs; never the job) once it has stopped, within 10 s; 0 if none.
  static int AwaitStopped() {
    for (int i = 0; i < 2000; ++i) {
      for (const int pid : coord::ProcessTree(::getpid())) {
        const std::string name = coord::ProcessName(pid);
        const bool criu = name.rfind("criu", 0) == 0 && name != "criu_job";
        if (ProcState(pid) == 'T' && (criu || name == "cusnap")) return pid;
      }
      ::usleep(5'000);
    }
    return 0;
  }

  /// Runs `command` (a CRIU run) with CUSNAP_TEST_PAUSE_AT=`patterns`; at each pause, as
  /// `log` (CRIU's log) shows it, once what paused has stopped, calls `at(<the pause>)` and
  /// continues it. Returns what the command gave; `pauses` counts the pauses met.
  Ran PausedAt(const std::string& patterns, const std::string& log,
               const std::function<void(const std::string&)>& at,
               const std::function<Ran()>& command, size_t* pauses = nullptr) {
    ::setenv("CUSNAP_TEST_PAUSE_AT", patterns.c_str(), 1);
    std::atomic<bool> done = false;
    Ran ran;
    std::thread runner([&] {
      ran = command();
      done = true;
    });
    const std::string mark = "cusnap-test-pause: ";
    size_t handled = 0;
    while (!done) {
      const std::string text = ReadAll(log);
      std::vector<std::string> seen;
      for (size_t k = text.find(mark); k != std::string::npos; k = text.find(mark, k + 1)) {
        const size_t end = text.find('\n', k);
        if (end != std::string::npos) seen.push_back(text.substr(k + mark.size(), end - k - mark.size()));
      }
      if (seen.size() <= handled) {
        ::usleep(5'000);
        continue;
      }
      const std::string pause = seen[handled++];
      const int stopped = AwaitStopped();
      EXPECT_GT(stopped, 0) << "nothing stopped at " << pause;
      at(pause);
      if (stopped > 0) ::kill(stopped, SIGCONT);
    }
    runner.join();
    ::unsetenv("CUSNAP_TEST_PAUSE_AT");
    if (pauses != nullptr) *pauses = handled;
    return ran;
  }

  /// PausedAt `pause`, where `victim` is SIGKILLed (and waited for).
  Ran KilledAt(const std::string& pause, int victim, const std::string& log,
               const std::function<Ran()>& command) {
    size_t pauses = 0;
    const Ran ran = PausedAt(pause, log, [&](const std::string&) {
      ::kill(victim, SIGKILL);
      while (ProcState(victim) != 'Z' && ::kill(victim, 0) == 0 && !coord::ProcessExited(victim)) {
        ::usleep(2'000);
      }
    }, command, &pauses);
    EXPECT_EQ(pauses, 1u) << "no pause at " << pause << ": " << ReadAll(log);
    return ran;
  }

  /// The driver calls process `role` of a call-logged job of its own (SIMCUDA_CALL_LOG) had
  /// made at each pause of `pauses` (each "dump:<phase>:<when>" or "restore:<phase>:<when>",
  /// in the order they come) through a clean plugin dump and, when a pause is a restore's, the
  /// plugin restore of its images: pause -> entry point -> calls so far. The job is gone
  /// again after; the fixture's own job is started after this.
  std::map<std::string, std::map<std::string, size_t>> CallsAt(
      const std::vector<std::string>& pauses, const std::string& role) {
    const std::string main_dir = job_dir_, main_log = log_, calls = dir_ + "/calls";
    job_dir_ = dir_ + "/record-job";
    log_ = dir_ + "/record.log";
    std::filesystem::create_directories(calls);
    ::setenv("SIMCUDA_CALL_LOG", calls.c_str(), 1);
    StartJob();
    ::unsetenv("SIMCUDA_CALL_LOG");
    const int pid = PidOf(role);
    std::map<std::string, std::map<std::string, size_t>> seen;
    const auto note = [&](const std::string& pause) {
      std::ifstream in(calls + "/" + std::to_string(pid) + ".calls");
      auto& counts = seen[pause];
      for (std::string line; std::getline(in, line);) ++counts[line];
    };
    std::string dump_pauses, restore_pauses;
    for (const auto& p : pauses) {
      std::string& to = p.rfind("dump:", 0) == 0 ? dump_pauses : restore_pauses;
      to += (to.empty() ? "" : ",") + p;
    }
    const Ran dump = PausedAt(dump_pauses, dir_ + "/record/dump.log", note, [&] { return Dump("record"); });
    EXPECT_EQ(dump.status, 0) << dump.err << Log("record", "dump");
    AwaitJobGone();
    if (!restore_pauses.empty()) {
      const Ran restore = PausedAt(restore_pauses, dir_ + "/record/restore.log", note,
                                   [&] { return Restore("record"); });
      EXPECT_EQ(restore.status, 0) << restore.err << Log("record", "restore");
      EXPECT_THAT(Log("record", "restore"), Not(HasSubstr("Error: cusnap_criu")));
      for (const int p : coord::ProcessTree(root_)) ::kill(p, SIGKILL);
      AwaitJobGone();
    }
    job_dir_ = main_dir;
    log_ = main_log;
    root_ = -1;
    return seen;
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

// A cusnap step the plugin runs, and the driver call that fails there.
struct DriverStep {
  const char* command;  // "dump" (the plugin's init) or "restore" (its exit), as cusnap names them
  const char* phase;    // the phase, as its line names it
  const char* role;     // criu_job's process that makes the call: "root" or "child"
  const char* entry;    // the driver entry point
};

void PrintTo(const DriverStep& step, std::ostream* os) {
  *os << step.command << ":" << step.phase << " " << step.role << " " << step.entry;
}

std::string StepName(const ::testing::TestParamInfo<DriverStep>& info) {
  return std::string(info.param.phase) + "_" + info.param.role + "_" + info.param.entry;
}

// The driver's error injected at one call of a step of the plugin's sequence, in the job's
// process that makes it (CRIU_JOB_FAULT, armed from the process's start: CRIU takes the armed
// fault to disk with the process, so a restore step's call fails in the restored process).
class CriuPluginDriverError : public CriuPluginFaults,
                              public ::testing::WithParamInterface<DriverStep> {
 protected:
  /// Starts the fixture's job with the step's call failing: the first call of the entry point
  /// within the step, as a clean plugin dump (and restore) of a job of its own counted them
  /// (CallsAt), which must make one there.
  void StartJobFailingInTheStep() {
    const DriverStep& step = GetParam();
    const std::string at = std::string(step.command) + ":" + step.phase + ":";
    auto seen = CallsAt({at + "before", at + "after"}, step.role);
    const size_t before = seen[at + "before"][step.entry];
    ASSERT_GT(seen[at + "after"][step.entry], before)
        << step.phase << " makes no " << step.entry << " call in the " << step.role;
    const std::string fault = std::string(step.role) + ":" + step.entry + ":" +
                              std::to_string(before + 1) + ":999";  // CUDA_ERROR_UNKNOWN
    ::setenv("CRIU_JOB_FAULT", fault.c_str(), 1);
    StartJob();
    ::unsetenv("CRIU_JOB_FAULT");
  }
};

class CriuPluginDriverErrorInADumpStep : public CriuPluginDriverError {};

// CRIU's dump fails in the plugin's init with the step's failure in its log, before CRIU froze
// anything; the job runs on in place, as it was, every byte kept (a step before the point of
// no return rolled back, one after it rolled forward); no dump is left in the directory.
TEST_P(CriuPluginDriverErrorInADumpStep, FailsTheDumpByNameAndTheJobRunsOnWithEveryByte) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJobFailingInTheStep());
  const Ran dump = Dump("images");
  EXPECT_NE(dump.status, 0);
  const std::string log = Log("images", "dump");
  EXPECT_THAT(log, HasSubstr("cusnap_criu: cusnap: " + std::string(GetParam().phase) + " "));
  EXPECT_THAT(log, HasSubstr("CUDA_ERROR_UNKNOWN (999)"));
  EXPECT_THAT(log, HasSubstr("Error: cusnap_criu: cusnap criu-plugin dump failed"));
  EXPECT_THAT(log, HasSubstr("Failed in init(0) of \"cusnap_criu\""));
  EXPECT_FALSE(coord::HasManifest(dir_ + "/images"));
  EXPECT_FALSE(coord::HasPendingManifest(dir_ + "/images"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive(2));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CriuPluginDriverErrorInADumpStep,
    ::testing::Values(DriverStep{"dump", "quiesce", "root", "cuCtxSynchronize"},
                      DriverStep{"dump", "save", "root", "cuMemHostRegister"},
                      DriverStep{"dump", "save", "root", "cuMemcpyDtoHAsync"},
                      DriverStep{"dump", "release", "root", "cuMemRelease"},
                      DriverStep{"dump", "release", "child", "cuMemUnmap"},
                      DriverStep{"dump", "save", "root", "cuStreamSynchronize"}),
    StepName);

class CriuPluginDriverErrorInARestoreStep : public CriuPluginDriverError {};

// The step fails once CRIU brought the processes back (the plugin's exit: CRIU cannot be
// failed any more): its failure is named in CRIU's log with the command that finishes the
// restore, as `restore --images-dir` names it, and that command brings every byte back.
TEST_P(CriuPluginDriverErrorInARestoreStep, IsNamedAndRecoverFinishesTheRestoreWithEveryByte) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJobFailingInTheStep());
  ASSERT_NO_FATAL_FAILURE(DumpAndAwaitGone("images"));
  const Ran restore = Restore("images");
  EXPECT_EQ(restore.status, 0) << restore.err;  // CRIU's part succeeded
  const std::string log = Log("images", "restore");
  EXPECT_THAT(log, HasSubstr("cusnap_criu: cusnap: " + std::string(GetParam().phase) + " "));
  EXPECT_THAT(log, HasSubstr("CUDA_ERROR_UNKNOWN (999)"));
  EXPECT_THAT(log, HasSubstr("Error: cusnap_criu: cusnap criu-plugin restore failed"));
  EXPECT_THAT(log, HasSubstr("'cusnap recover --pid " + std::to_string(root_) +
                             "' finishes the restore"));
  const Ran recover =
      Cusnap({"recover", "--pid", std::to_string(root_), "--state-dir", dir_ + "/images"});
  EXPECT_EQ(recover.status, 0) << recover.out << recover.err;
  ASSERT_NO_FATAL_FAILURE(AwaitActive(2));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CriuPluginDriverErrorInARestoreStep,
    ::testing::Values(DriverStep{"restore", "reallocate", "root", "cuMemCreate"},
                      DriverStep{"restore", "reallocate", "child", "cuMemcpyHtoDAsync"},
                      DriverStep{"restore", "import", "child", "cuMemImportFromShareableHandle"}),
    StepName);

}  // namespace
}  // namespace cusnap::testing
