// The long-suspend hold (docs/LONG-SUSPEND.md, coordinator/participants/hold.h) end to end on the
// simulated driver: with CUSNAP_HOLD=stop (the default) `cusnap checkpoint` leaves every
// participant stopped, `cusnap status` names them held without waiting for their endpoints,
// `cusnap restore` continues them and the job goes on with every byte; a process the user
// stopped is never continued by cusnap.
#include <gmock/gmock.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

/// The bytes of the file at `path` ("" when it cannot be read).
std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using cusnap::testing::ProcState;

class CliJobHold : public JobTest {
 protected:
  void SetUp() override {
    JobTest::SetUp();
    ::setenv("CUSNAP_HOLD", "stop", 1);  // the default, said outright (JobTest sets run)
  }
  void TearDown() override {
    // A failed test may leave workers stopped: TearDown's "exit" would wait for nothing.
    for (auto& w : workers_) {
      if (w.pid > 0) ::kill(w.pid, SIGCONT);
    }
    JobTest::TearDown();
  }
  /// Starts a worker on device 0 that creates allocation "A" (`mib` MiB), maps it whole as
  /// view "a" with access for `devices` and fills it with its pattern.
  Worker& StartFilled(const std::string& name, size_t mib, const std::string& devices) {
    Worker& w = Start(name, 0);
    Create(w, "A", mib, "dev", 0);
    Map(w, "a", "A", 0, mib, devices);
    Fill(w, "a");
    return w;
  }
  /// Waits until `w`'s heartbeat monitor (job_worker "heartbeat") sampled 100-600 ms ago, so
  /// that its next sample comes well after the checkpoint stalls the watchdog. A sample taken
  /// between the stall and the stop is the one thing a stopped job can still trip over at
  /// SIGCONT (docs/LONG-SUSPEND.md); this test is about the hold, not that window.
  void JustAfterASample(Worker& w) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::istringstream reply(Ask(w, "beats"));
      std::string ok;
      uint64_t beats = 0, samples = 0;
      int64_t since_ms = -1;
      reply >> ok >> beats >> samples >> since_ms;
      ASSERT_EQ(ok, "ok");
      if (since_ms >= 100 && since_ms <= 600) return;
      ::usleep(10'000);
    }
    FAIL() << "no heartbeat sample seen";
  }
  /// "beats" parsed: {beats, samples}.
  std::pair<uint64_t, uint64_t> Beats(Worker& w) {
    std::istringstream reply(Ask(w, "beats"));
    std::string ok;
    uint64_t beats = 0, samples = 0;
    reply >> ok >> beats >> samples;
    EXPECT_EQ(ok, "ok");
    return {beats, samples};
  }
  /// Starts job_worker on device 0 as an interactive shell starts `cusnap run -- ... &`: a
  /// bash with job control (`set -m`) in a session of its own puts it in a process group of
  /// its own, then runs `then` ("wait", a loop). Returns the worker (its pid, not the
  /// shell's: the shell's child, reaped by whoever adopts it); `shell` gets the shell's pid.
  /// Commands target the worker from now on (the shell's tree loses it when the shell goes).
  Worker& StartUnderShell(const std::string& then, pid_t& shell) {
    const std::string bin = std::getenv("CUSNAP_TEST_BIN_DIR");
    Worker& job = StartProgram("job", {"/usr/bin/setsid", "/bin/bash", "-c",
                                       "set -m; \"$@\" 0<&0 & " + then, "shell",
                                       bin + "/cusnap", "run", "--", bin + "/job_worker", "0"});
    EXPECT_EQ(Ask(job, ""), "ready");
    shell = job.pid;
    const std::string pid = OkValue(Ask(job, "pid"));
    EXPECT_FALSE(pid.empty());
    job.pid = pid.empty() ? -1 : std::stoi(pid);
    job.child = false;
    target_ = {"--pid", pid};
    return job;
  }
  std::string HeldMarker(pid_t pid) const {
    return std::string(std::getenv("CUSNAP_CONTROL_DIR")) + "/" + std::to_string(pid) + ".held";
  }
  /// A job that shares memory: "creator" (StartFilled: allocation A, 4 MiB, access for
  /// devices 0 and 1) and "importer" on device 1, which imports A and maps it whole.
  std::pair<Worker*, Worker*> StartSharingPair() {
    Worker& creator = StartFilled("creator", 4, "0,1");
    Worker& importer = Start("importer", 1);
    Share(creator, "A", importer);
    Map(importer, "a", "A", 0, 4, "1");
    return {&creator, &importer};
  }
  /// Runs `cusnap args` paused at `pause` (CUSNAP_TEST_PAUSE_AT, cli/test_pause.h, added to
  /// cusnap_env_ for this command) and calls `at_pause(cli)` once the CLI stopped itself
  /// there (it prints the pause line first: a signal before the stop would be lost). False
  /// when it never paused; `ran` gets what it printed and its exit.
  bool RunPaused(const std::vector<std::string>& args, const std::string& pause,
                 const std::function<void(pid_t)>& at_pause, Ran* ran = nullptr) {
    cusnap_env_.push_back("CUSNAP_TEST_PAUSE_AT=" + pause);
    bool paused = false;
    const Ran r = CusnapWatched(args, [&](pid_t cli, const Ran& so_far) {
      if (paused || so_far.err.find("cusnap-test-pause") == std::string::npos) return;
      while (ProcState(cli) != 'T') ::usleep(2'000);
      paused = true;
      at_pause(cli);
    });
    cusnap_env_.pop_back();
    if (ran != nullptr) *ran = r;
    return paused;
  }
};

TEST_F(CliJobHold, CheckpointStopsEveryParticipantAndRestoreContinuesThem) {
  const auto [creator_ptr, importer_ptr] = StartSharingPair();
  ASSERT_FALSE(HasFailure());
  Worker& creator = *creator_ptr;
  Worker& importer = *importer_ptr;
  const Snapshot before = Snap();

  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  for (Worker* w : {&creator, &importer}) {
    EXPECT_EQ(ProcState(w->pid), 'T') << w->name;
    EXPECT_TRUE(std::filesystem::exists(HeldMarker(w->pid))) << w->name;
  }

  // status shows the held processes as released and held, at once (their endpoints cannot
  // answer: they are not asked).
  const auto asked = std::chrono::steady_clock::now();
  const Ran st = Cusnap({"status", "--all"});
  const Ran st_json = Cusnap({"status", "--all", "--json"});
  const auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_LT(took, std::chrono::seconds(8));
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr(" released     held: stopped by the 'cusnap checkpoint' or "
                                "'cusnap dump' that released its memory; 'cusnap restore' (or "
                                "'cusnap recover') continues it and goes on (CUSNAP_HOLD=run "
                                "keeps such a job running); its tables were not read (the "
                                "process is stopped)"));
  const auto doc = nlohmann::json::parse(st_json.out);
  ASSERT_EQ(doc["participants"].size(), 2u);
  for (const auto& p : doc["participants"]) {
    EXPECT_EQ(p["phase"], "released") << p.dump();
    EXPECT_EQ(p["held"], true) << p.dump();
  }

  // A second checkpoint is refused at once from the markers (the held endpoints cannot
  // answer), saying the job stays held; it stays held.
  const auto second = std::chrono::steady_clock::now();
  const Ran again = Checkpoint(dir_ + "/state2");
  EXPECT_LT(std::chrono::steady_clock::now() - second, std::chrono::seconds(5));
  EXPECT_EQ(again.status, kExitRefused) << again.out << again.err;
  EXPECT_THAT(again.err, HasSubstr("is held: checkpointed and stopped by 'cusnap checkpoint' "
                                   "until 'cusnap restore' continues it; restore it first"));
  EXPECT_THAT(again.err, HasSubstr("refused; nothing was changed, the job stays checkpointed "
                                   "and held (stopped until 'cusnap restore')"));
  for (Worker* w : {&creator, &importer}) EXPECT_EQ(ProcState(w->pid), 'T') << w->name;

  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  for (Worker* w : {&creator, &importer}) {
    EXPECT_NE(ProcState(w->pid), 'T') << w->name;
    EXPECT_FALSE(std::filesystem::exists(HeldMarker(w->pid))) << w->name;
  }
  ExpectSameLayout(before, Snap());
  CheckEveryByte();
  CrossWrite(creator, "a", importer, "a");
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  const auto after = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
  for (const auto& p : after["participants"]) EXPECT_EQ(p["held"], false) << p.dump();
}

// What fires in a held job whose threads stay runnable (CUSNAP_HOLD=run): the watchdog waits
// in the locked driver, the monitor, which never calls the driver, finds no beat and ends the
// process while it is checkpointed (PyTorch's heartbeat monitor, docs/LONG-SUSPEND.md).
TEST_F(CliJobHold, HeartbeatMonitorEndsAHeldJobThatStaysRunnable) {
  ::setenv("CUSNAP_HOLD", "run", 1);
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(Ask(w, "heartbeat 1000"), "ok");
  ASSERT_NO_FATAL_FAILURE(JustAfterASample(w));
  ASSERT_EQ(Checkpoint(dir_ + "/state").status, 0);
  // Two samples at most after the stall; never "exit" before (its stdin reader still runs).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ProcState(w.pid) != 'Z' && std::chrono::steady_clock::now() < deadline) ::usleep(20'000);
  ASSERT_EQ(ProcState(w.pid), 'Z') << "the monitor did not end the held process";
  const int status = Stop(w);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 97) << "wait status " << status;
}

// The same job held stopped (the default) for over twice the monitor's timeout: nothing runs
// while it is held, and after the restore the watchdog beats again, the monitor samples on,
// and every byte is there.
TEST_F(CliJobHold, StoppedHeldJobOutlivesItsHeartbeatMonitor) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(Ask(w, "heartbeat 2000"), "ok");
  ASSERT_NO_FATAL_FAILURE(JustAfterASample(w));
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(ProcState(w.pid), 'T');
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  const auto [beats, samples] = Beats(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const auto [beats_later, samples_later] = Beats(w);
  EXPECT_GT(beats_later, beats);
  EXPECT_GT(samples_later, samples);
  EXPECT_NE(ProcState(w.pid), 'Z');
  CheckEveryByte();
}

// A job started in the background by a shell with job control (`cusnap run -- ... &`: a
// process group of its own in the shell's session), and the shell exits while the job is
// held. The job's group is then orphaned with a stopped member, and the kernel sends every
// member SIGHUP, then SIGCONT: with SIGHUP's default disposition the held job would die
// (shim/hold/hold_guard.h). It must stay held, and the
// restore must bring back every byte.
TEST_F(CliJobHold, HeldJobOutlivesTheShellThatStartedIt) {
  pid_t shell = 0;
  Worker& job = StartUnderShell("while :; do sleep 1; done", shell);
  ASSERT_FALSE(HasFailure());
  const std::string pid = std::to_string(job.pid);
  ASSERT_EQ(::getsid(job.pid), shell);
  ASSERT_EQ(::getpgid(job.pid), job.pid) << "job control put the job in a group of its own";
  ASSERT_NO_FATAL_FAILURE(Create(job, "A", 4, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(job, "a", "A", 0, 4, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(job, "a"));
  const Snapshot before = Snap();
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  ASSERT_EQ(ProcState(job.pid), 'T');

  // The shell goes (SIGKILL: it sends its jobs nothing itself); its exit orphans the job's
  // group, and the kernel's SIGHUP and SIGCONT are sent before waitpid returns.
  ASSERT_EQ(::kill(shell, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(shell, &status, 0), shell);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(job.pid, 0), 0) << "the held job died with its shell";
  EXPECT_EQ(ProcState(job.pid), 'T') << "the hangup's SIGCONT left the held job running";
  EXPECT_TRUE(std::filesystem::exists(HeldMarker(job.pid)));

  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_NE(ProcState(job.pid), 'T');
  ExpectSameLayout(before, Snap());
  CheckEveryByte();
  EXPECT_EQ(Phases(), std::vector<std::string>(1, "active"));
  // The job goes on after its restore: a hangup from the kernel is not replayed.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(Ask(job, "pid"), "ok " + pid);
}

// What cusnap cannot keep: a shell with job control whose `wait` returns when the job stops
// (the hold) exits, and bash sends the stopped jobs it lists SIGTERM (terminate_stopped_jobs).
// The checkpoint must say that the process ended, not that it would not stop (README,
// CUSNAP_HOLD: setsid or disown).
TEST_F(CliJobHold, AJobItsExitingShellEndsIsNamedAsEnded) {
  pid_t shell = 0;
  Worker& job = StartUnderShell("wait", shell);
  ASSERT_FALSE(HasFailure());
  const std::string pid = std::to_string(job.pid);
  ASSERT_NO_FATAL_FAILURE(Create(job, "A", 2, "dev", 0));
  const auto started = std::chrono::steady_clock::now();
  const Ran ck = Checkpoint(dir_ + "/state");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  // The shell races the hold's wait for the stop: seen stopped first, the checkpoint ends
  // well and the job dies after it; otherwise the checkpoint names the end.
  if (ck.status != 0) {
    EXPECT_EQ(ck.status, kExitFailedAfterChange) << ck.out << ck.err;
    EXPECT_THAT(ck.err, HasSubstr("pid " + pid + ": ended right after SIGSTOP stopped "
                                  "it for the hold (its shell may end the stopped jobs it lists"));
  }
  int status = 0;
  EXPECT_EQ(::waitpid(shell, &status, 0), shell);
  // The shell's SIGTERM ends the job after the shell is gone, and the job's new parent (pid 1
  // here, whatever it is) reaps it when it will: gone or a zombie, within seconds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::kill(job.pid, 0) == 0 && ProcState(job.pid) != 'Z' &&
         std::chrono::steady_clock::now() < deadline)
    ::usleep(20'000);
  EXPECT_TRUE(::kill(job.pid, 0) != 0 || ProcState(job.pid) == 'Z')
      << "the job its shell ended still runs (state " << ProcState(job.pid) << ")";
  job.pid = -1;
}

// A terminal that hangs up makes bash send its jobs SIGHUP, then SIGCONT: the held job stays
// held (the hangup is dropped while it is checkpointed), and runs on after the restore.
TEST_F(CliJobHold, HangupFromTheShellLeavesTheJobHeld) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  ASSERT_EQ(ProcState(w.pid), 'T');
  ASSERT_EQ(::kill(w.pid, SIGHUP), 0);
  ASSERT_EQ(::kill(w.pid, SIGCONT), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(w.pid, 0), 0) << "the held job died of SIGHUP";
  EXPECT_EQ(ProcState(w.pid), 'T') << "a held process must stay held";
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(OkValue(Ask(w, "pid")), std::to_string(w.pid));
}

// A plain SIGCONT (`kill -CONT`, a shell's `bg`, a supervisor) must not continue a held
// process: its GPU memory is released until the restore. It is stopped again at once, every
// time, and the restore still brings back every byte and runs it on.
TEST_F(CliJobHold, PlainContinueLeavesTheJobHeld) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  ASSERT_EQ(ProcState(w.pid), 'T');
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(::kill(w.pid, SIGCONT), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ProcState(w.pid) != 'T' && std::chrono::steady_clock::now() < deadline) {
      ::usleep(5'000);
    }
    EXPECT_EQ(ProcState(w.pid), 'T') << "SIGCONT " << k << " left the held process running";
    EXPECT_TRUE(std::filesystem::exists(HeldMarker(w.pid)));
  }
  const auto st = nlohmann::json::parse(Cusnap({"status", "--all", "--json"}).out);
  ASSERT_EQ(st["participants"].size(), 1u) << st.dump();
  EXPECT_EQ(st["participants"][0]["held"], true) << st.dump();
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_NE(ProcState(w.pid), 'T');
  CheckEveryByte();
  EXPECT_EQ(OkValue(Ask(w, "pid")), std::to_string(w.pid));
  // After activate the guard is gone: a SIGSTOP/SIGCONT pair of the user's works as ever.
  ASSERT_EQ(::kill(w.pid, SIGSTOP), 0);
  ASSERT_EQ(::kill(w.pid, SIGCONT), 0);
  EXPECT_EQ(OkValue(Ask(w, "pid")), std::to_string(w.pid));
}

// A second command on a job another command is at work on (a restore run while a checkpoint
// is between release and its native checkpoint would restore the job under it, the
// checkpoint would go on, and nothing could bring the job back): refused, naming the
// process, before anything changes; the first command ends as if alone.
TEST_F(CliJobHold, ACommandOnAJobAnotherCommandIsAtWorkOnIsRefused) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string cusnap = cusnap::testing::Env("CUSNAP_TEST_BIN_DIR") + "/cusnap";
  const std::string pid = std::to_string(w.pid);
  // The first command pauses between release and its native checkpoint (the pause knob);
  // the others run meanwhile; then it goes on.
  const auto r = cusnap::testing::RunCommand(
      "cd " + dir_ + " || exit; CUSNAP_TEST_PAUSE_AT=checkpoint:release:after " + cusnap +
          " checkpoint --pid " + pid +
          " --state-dir state >first.out 2>first.err & cli=$!; "
          "until grep -q cusnap-test-pause first.err; do sleep 0.05; done; " +
          cusnap + " restore --pid " + pid + " --state-dir state >/dev/null 2>second.err; echo $?; " +
          cusnap + " checkpoint --pid " + pid + " --state-dir other >/dev/null 2>third.err; echo $?; "
          "kill -CONT $cli; wait $cli; echo $?",
      dir_);
  EXPECT_EQ(r.out, "5\n3\n0\n") << r.err << ReadFile(dir_ + "/first.err");
  for (const std::string& name : {std::string("second.err"), std::string("third.err")}) {
    const std::string err = ReadFile(dir_ + "/" + name);
    EXPECT_THAT(err, HasSubstr("pid " + pid + " is in the middle of another cusnap command (that "
                               "command holds "));
    EXPECT_THAT(err, HasSubstr("refused; nothing was changed, and another cusnap command is at "
                               "work on the job (pid " + pid + "): that command's own output says "
                               "what state it leaves the job in"));
  }
  const Ran rs = Restore(dir_ + "/state");
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A restore from a shell whose control directory is another one (another XDG_RUNTIME_DIR,
// an ssh login) must not ask the driver about the held, stopped processes, which waits for
// ever: it names the directory their shims use, at once.
TEST_F(CliJobHold, ARestoreWithAnotherControlDirectoryNamesTheJobsAtOnce) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const Ran ck = Checkpoint(dir_ + "/state");
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const std::string other = dir_ + "/other-control";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  const auto r = cusnap::testing::RunCommand(
      "{ CUSNAP_CONTROL_DIR=" + other + " timeout -s KILL 30 " +
          cusnap::testing::Env("CUSNAP_TEST_BIN_DIR") + "/cusnap restore --pid " +
          std::to_string(w.pid) + " --state-dir " + dir_ + "/state; echo $?; }",
      dir_);
  EXPECT_THAT(r.out, ::testing::EndsWith("5\n")) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("its environment puts its endpoint in "));
  EXPECT_THAT(r.err, HasSubstr("run the command with CUSNAP_CONTROL_DIR="));
  // status and --all there found nobody and said only that; they name where the job is.
  const std::string control = cusnap::testing::Env("CUSNAP_CONTROL_DIR");
  const std::string bin = cusnap::testing::Env("CUSNAP_TEST_BIN_DIR");
  const auto st = cusnap::testing::RunCommand(
      "{ CUSNAP_CONTROL_DIR=" + other + " " + bin + "/cusnap status; echo $?; CUSNAP_CONTROL_DIR=" +
          other + " " + bin + "/cusnap restore --all --state-dir " + dir_ + "/state; echo $?; }",
      dir_);
  // (Jobs of other tests, in directories of their own, may be named too.)
  EXPECT_THAT(st.out, HasSubstr("no participants\n"));
  EXPECT_THAT(st.out, HasSubstr("cusnap processes in another control directory: " + control +
                                " (pid " + std::to_string(w.pid) + "): run 'CUSNAP_CONTROL_DIR=" +
                                control + " cusnap status'\n"));
  EXPECT_THAT(st.out, HasSubstr(" cusnap status'\n0\n"));
  EXPECT_THAT(st.out, ::testing::EndsWith("\n5\n")) << st.err;
  EXPECT_THAT(st.err, HasSubstr("no live cusnap endpoint in " + other + "; "));
  EXPECT_THAT(st.err, HasSubstr("cusnap processes serve their endpoints in " + control +
                                " (pid " + std::to_string(w.pid) + "): run the command with "
                                "CUSNAP_CONTROL_DIR=" + control));
  const Ran rs = Restore(dir_ + "/state");
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A process the user stopped (SIGSTOP, Ctrl-Z) cannot answer: checkpoint names it at once
// (it waited 20 s for the endpoint and said "identify failed"), changes nothing, and works
// once the process is continued.
TEST_F(CliJobHold, AProcessStoppedByTheUserIsNamedAtOnce) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(::kill(w.pid, SIGSTOP), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ProcState(w.pid) != 'T' && std::chrono::steady_clock::now() < deadline) ::usleep(5'000);
  const auto started = std::chrono::steady_clock::now();
  const Ran ck = Checkpoint(dir_ + "/state");
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("pid " + std::to_string(w.pid) + " (job_worker) is stopped (state "
                                "T), not by cusnap: its endpoint cannot answer; continue it ('kill "
                                "-CONT " + std::to_string(w.pid) + "')"));
  EXPECT_EQ(ProcState(w.pid), 'T') << "cusnap continued a process it did not stop";
  // status names it at once too (it waited for the endpoint's deadline, 10 s).
  const auto asked = std::chrono::steady_clock::now();
  const Ran st = Cusnap({"status", "--all"});
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));
  EXPECT_EQ(st.status, 1) << st.out << st.err;
  EXPECT_THAT(st.err, HasSubstr("pid " + std::to_string(w.pid) + " (job_worker) is stopped (state "
                                "T), not by cusnap"));
  // ... and still lists it, as unreachable, in text and JSON alike.
  EXPECT_THAT(st.out, HasSubstr("unreachable")) << st.out;
  const Ran js = Cusnap({"status", "--all", "--json"});
  EXPECT_EQ(js.status, 1) << js.out << js.err;
  const auto doc = nlohmann::json::parse(js.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << js.out;
  bool listed = false;
  for (const auto& p : doc["participants"]) {
    if (p.value("pid", 0) != w.pid) continue;
    listed = true;
    EXPECT_EQ(p.value("phase", ""), "unreachable") << p;
    EXPECT_THAT(p.value("unreachable", ""), HasSubstr("not by cusnap")) << p;
  }
  EXPECT_TRUE(listed) << js.out;
  EXPECT_EQ(ProcState(w.pid), 'T');
  ASSERT_EQ(::kill(w.pid, SIGCONT), 0);
  const Ran again = Checkpoint(dir_ + "/state");
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  const Ran rs = Restore(dir_ + "/state");
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A restore that is refused (here: a state directory with no checkpoint in it) changed
// nothing, so the job it continued to talk to is held again, as it was found.
TEST_F(CliJobHold, RefusedRestoreLeavesTheJobHeld) {
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  ASSERT_EQ(ProcState(w.pid), 'T');
  std::filesystem::create_directories(dir_ + "/empty");
  const Ran wrong = Restore(dir_ + "/empty");
  EXPECT_EQ(wrong.status, kExitRestoreRefused) << wrong.out << wrong.err;
  EXPECT_THAT(wrong.err, HasSubstr("nothing was changed"));
  // The checkpoint's own state directory is named before the held job is continued.
  EXPECT_THAT(wrong.err, HasSubstr("no checkpoint in " + dir_ + "/empty; the job's checkpoint "
                                   "is in " + state + ": run 'cusnap restore --pid "));
  EXPECT_EQ(ProcState(w.pid), 'T');
  EXPECT_TRUE(std::filesystem::exists(HeldMarker(w.pid)));
  // Refused once it continued the job: stopped again.
  const Ran mapped = Restore(state, {"--device-map", "0=1,1=1"});
  EXPECT_EQ(mapped.status, kExitRestoreRefused) << mapped.out << mapped.err;
  EXPECT_THAT(mapped.err, HasSubstr("1 held process stopped again, as before the command"));
  EXPECT_EQ(ProcState(w.pid), 'T');
  EXPECT_TRUE(std::filesystem::exists(HeldMarker(w.pid)));
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A restore killed after it continued the held job, before it changed anything (the job
// would run on with its memory gone until the next restore, and a heartbeat monitor could
// end it meanwhile): each participant stops itself again once it
// ran a lease with no command at work (shim/lifecycle/lifecycle.h, the hold after a
// command), and the next restore brings every byte back. Killed before discovery (no lease
// yet), after match (the lease running, nothing changed) and after reallocate (half way).
TEST_F(CliJobHold, ARestoreKilledAfterItContinuedTheJobLeavesItHeldAgain) {
  const auto [creator, importer] = StartSharingPair();
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  for (const std::string point : {"restore:read_state:before", "restore:match:after",
                                  "restore:reallocate:after"}) {
    SCOPED_TRACE(point);
    cusnap_env_ = {"CUSNAP_LEASE_MS=1000"};
    const Ran ck = Checkpoint(state);
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    Ran rs;
    ASSERT_TRUE(RunPaused({"restore", "--all", "--state-dir", state}, point,
                          [](pid_t cli) { ::kill(cli, SIGKILL); }, &rs))
        << rs.out << rs.err;
    // The restore continued them; each stops itself again about a lease later.
    const auto killed_at = std::chrono::steady_clock::now();
    for (Worker* w : {creator, importer}) {
      while ((ProcState(w->pid) != 'T' || !std::filesystem::exists(HeldMarker(w->pid))) &&
             std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(20)) {
        ::usleep(20'000);
      }
      EXPECT_EQ(ProcState(w->pid), 'T') << w->name << " runs on, not held";
      EXPECT_TRUE(std::filesystem::exists(HeldMarker(w->pid))) << w->name;
    }
    const Ran st = Cusnap({"status", "--all"});
    EXPECT_THAT(st.out, HasSubstr("held: stopped again by itself")) << st.out << st.err;
    if (point == "restore:reallocate:after") {  // where it stopped, not "released"
      EXPECT_THAT(st.out, HasSubstr("reallocated")) << st.out;
      // ... and not "its memory is released"
      EXPECT_THAT(st.out, HasSubstr("its memory is back on the GPU, the restore unfinished")) << st.out;
      EXPECT_THAT(st.out, ::testing::Not(HasSubstr("memory is released"))) << st.out;
    }
    const Ran again = Restore(state);
    ASSERT_EQ(again.status, 0) << again.out << again.err;
    CheckEveryByte();
  }
  cusnap_env_.clear();
}

// A restore about a (short) lease after the checkpoint: the processes were stopped for less
// than the watcher could see, while the checkpoint's lease ran out, and stopped themselves
// again as the restore continued them (as with CUSNAP_LEASE_MS=1000 and a pause of 0.9-1.1
// s). Each restore works, none is refused.
TEST_F(CliJobHold, ARestoreAboutALeaseAfterTheCheckpointIsNotRefused) {
  StartSharingPair();
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  cusnap_env_ = {"CUSNAP_LEASE_MS=1000"};
  for (const int pause_ms : {800, 900, 1000, 1100, 1200}) {
    SCOPED_TRACE(pause_ms);
    ASSERT_EQ(Checkpoint(state).status, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    const Ran rs = Restore(state);
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  }
  cusnap_env_.clear();
  CheckEveryByte();
}

// With CUSNAP_HOLD=run the checkpoint leaves the job runnable, and a killed restore does not
// stop it either: only a job held stopped is held again.
TEST_F(CliJobHold, ARestoreKilledInRunModeLeavesTheJobRunnable) {
  ::setenv("CUSNAP_HOLD", "run", 1);
  Worker& w = StartFilled("worker", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  cusnap_env_ = {"CUSNAP_LEASE_MS=500"};
  ASSERT_EQ(Checkpoint(state).status, 0);
  ASSERT_TRUE(RunPaused({"restore", "--all", "--state-dir", state}, "restore:match:after",
                        [](pid_t cli) { ::kill(cli, SIGKILL); }));
  cusnap_env_.clear();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_NE(ProcState(w.pid), 'T');
  EXPECT_FALSE(std::filesystem::exists(HeldMarker(w.pid)));
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A participant stopped (SIGSTOP, Ctrl-Z, a debugger) in the middle of a command answers
// nothing, and the command would wait up to its 10-minute bound, silently: it names the
// process within seconds. Stopped during the checkpoint's save (before
// anything was changed) the checkpoint is refused and, once continued, the process runs
// what it was asked and ends ACTIVE; stopped during a restore's reallocate the restore
// stops (exit 4) and `recover` finishes it once the process is continued. Every byte comes
// back either way.
TEST_F(CliJobHold, AParticipantStoppedInTheMiddleOfACommandIsNamedAtOnce) {
  const auto [creator_ptr, importer_ptr] = StartSharingPair();
  ASSERT_FALSE(HasFailure());
  Worker& creator = *creator_ptr;
  Worker& importer = *importer_ptr;
  const std::string state = dir_ + "/state";
  const auto stop_during = [&](const std::vector<std::string>& args, const std::string& pause,
                               Worker& victim) {
    cusnap_env_ = {"CUSNAP_LEASE_MS=1000"};
    const auto started = std::chrono::steady_clock::now();
    Ran r;
    EXPECT_TRUE(RunPaused(args, pause, [&](pid_t cli) {
      ::kill(victim.pid, SIGSTOP);
      while (ProcState(victim.pid) != 'T') ::usleep(2'000);
      ::kill(cli, SIGCONT);
    }, &r));
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
    EXPECT_THAT(r.err, HasSubstr("pid " + std::to_string(victim.pid) + " (job_worker) is stopped "
                                 "(state T), not by cusnap: its endpoint cannot answer; continue "
                                 "it ('kill -CONT " + std::to_string(victim.pid) + "'); it then "
                                 "runs what it was asked"));
    return r;
  };

  const Ran ck = stop_during({"checkpoint", "--all", "--state-dir", state},
                             "checkpoint:save:before", importer);
  EXPECT_EQ(ck.status, 3) << ck.out << ck.err;
  EXPECT_EQ(ProcState(creator.pid), 'S') << "the creator was not resumed";
  ::kill(importer.pid, SIGCONT);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Phases() != std::vector<std::string>{"active", "active"} &&
         std::chrono::steady_clock::now() < deadline) {
    ::usleep(50'000);
  }
  ASSERT_EQ(Phases(), (std::vector<std::string>{"active", "active"}));
  CheckEveryByte();

  ASSERT_EQ(Checkpoint(state).status, 0);
  const Ran rs = stop_during({"restore", "--all", "--state-dir", state},
                             "restore:reallocate:before", creator);
  EXPECT_EQ(rs.status, 4) << rs.out << rs.err;
  ::kill(creator.pid, SIGCONT);
  // The recovery under the default lease: a 1 s one can lapse between two renewals on a
  // loaded machine, and a process whose lease lapsed past the point of no return holds
  // itself stopped again (hold_again.h) in the middle of the recovery's import.
  cusnap_env_.clear();
  const Ran rec = Cusnap({"recover", "--all", "--state-dir", state});
  ASSERT_EQ(rec.status, 0) << rec.out << rec.err;
  CheckEveryByte();
}

// The same during a native step, which the driver runs through the process itself and which
// cannot be interrupted: the restore waits until the process is continued (minutes, maybe),
// and says, within seconds and once, what it waits for; continued, the
// process lets the restore finish, every byte back.
TEST_F(CliJobHold, ANativeStepWaitingForAStoppedProcessSaysSo) {
  const auto [creator, importer] = StartSharingPair();
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Checkpoint(state).status, 0);
  cusnap_env_ = {"CUSNAP_TEST_PAUSE_AT=restore:restore:before"};
  bool stopped = false, continued = false;
  // (The state query that comes first waits already.)
  const std::string pid = std::to_string(creator->pid);
  const std::string waiting = " of pid " + pid + ": pid " + pid + " (job_worker) is stopped "
                              "(state T), not by cusnap: its endpoint cannot answer; continue it "
                              "('kill -CONT " + pid + "'); the driver goes on once it runs again\n";
  const Ran rs = CusnapWatched({"restore", "--all", "--state-dir", state},
                               [&](pid_t cli, const Ran& so_far) {
    if (!stopped && so_far.err.find("cusnap-test-pause") != std::string::npos) {
      while (ProcState(cli) != 'T') ::usleep(2'000);
      stopped = ::kill(creator->pid, SIGSTOP) == 0;
      while (ProcState(creator->pid) != 'T') ::usleep(2'000);
      ::kill(cli, SIGCONT);
    } else if (stopped && !continued && so_far.out.find("\n-- waiting for the native ") !=
                                            std::string::npos &&
               so_far.out.find(waiting) != std::string::npos) {
      continued = ::kill(creator->pid, SIGCONT) == 0;
    }
  });
  cusnap_env_.clear();
  EXPECT_TRUE(continued) << rs.out << rs.err;
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

// A process that ended while held leaves its marker; `status --prune` removes it (and only
// it: a live held process keeps its own).
TEST_F(CliJobHold, PruneRemovesTheMarkerOfAProcessThatEndedHeld) {
  Worker& gone = StartFilled("gone", 2, "0");
  Worker& kept = StartFilled("kept", 2, "0");
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(Checkpoint(dir_ + "/state").status, 0);
  const std::string marker = HeldMarker(gone.pid);
  ASSERT_TRUE(std::filesystem::exists(marker));
  Kill(gone);
  // Listed first, with what a dump (which leaves the same) needs of it: nothing.
  const Ran listed = Cusnap({"status", "--all"});
  EXPECT_THAT(listed.out, HasSubstr("stale hold marker " + marker +
                                    ": its process ended while held (safe to remove)"));
  EXPECT_THAT(listed.out, HasSubstr("'cusnap restore --images-dir <dir>' brings it back from its "
                                    "images, with or without them"));
  EXPECT_TRUE(std::filesystem::exists(marker));
  const Ran st = Cusnap({"status", "--all", "--prune"});
  EXPECT_THAT(st.out, HasSubstr("stale hold marker " + marker +
                                ": its process ended while held (removed)"));
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_TRUE(std::filesystem::exists(HeldMarker(kept.pid)));
  EXPECT_EQ(ProcState(kept.pid), 'T');
  Kill(kept);  // the job cannot be restored without 'gone'
}

TEST_F(CliJobHold, RunModeLeavesTheJobRunnable) {
  ::setenv("CUSNAP_HOLD", "run", 1);
  Worker& creator = StartFilled("creator", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  EXPECT_NE(ProcState(creator.pid), 'T');
  EXPECT_FALSE(std::filesystem::exists(HeldMarker(creator.pid)));
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

TEST_F(CliJobHold, BadHoldSettingChangesNothing) {
  Worker& creator = Start("creator", 0);
  ASSERT_NO_FATAL_FAILURE(Create(creator, "A", 2, "dev", 0));
  ::setenv("CUSNAP_HOLD", "freeze", 1);
  const Ran ck = Checkpoint(dir_ + "/state");
  EXPECT_EQ(ck.status, 2);
  EXPECT_THAT(ck.err, HasSubstr("CUSNAP_HOLD='freeze' is not one of stop, run; nothing was changed"));
  EXPECT_EQ(Phases(), std::vector<std::string>(1, "active"));
}

TEST_F(CliJobHold, RestoreNeverContinuesAProcessCusnapDidNotStop) {
  Worker& creator = StartFilled("creator", 2, "0");
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  ::setenv("CUSNAP_HOLD", "run", 1);
  ASSERT_EQ(Checkpoint(state).status, 0);
  // The user stops the checkpointed process; restore must not continue it (no marker): it
  // cannot answer, so restore fails before changing anything, and the process stays stopped.
  ASSERT_EQ(::kill(creator.pid, SIGSTOP), 0);
  while (ProcState(creator.pid) != 'T') ::usleep(1000);
  ::setenv("CUSNAP_HOLD", "stop", 1);
  const Ran rs = Restore(state);
  EXPECT_NE(rs.status, 0);
  EXPECT_EQ(ProcState(creator.pid), 'T');
  ::kill(creator.pid, SIGCONT);
  const Ran again = Restore(state);
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  CheckEveryByte();
}

}  // namespace
}  // namespace jobtest
