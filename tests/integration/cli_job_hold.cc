// The long-suspend hold (docs/LONG-SUSPEND.md, coordinator/hold.h) end to end on the
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
#include <sstream>
#include <thread>
#include <utility>
#include <string>

#include <nlohmann/json.hpp>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

/// The state letter of `pid` (/proc/<pid>/stat field 3), '?' when unreadable.
char ProcState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

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
  std::string HeldMarker(pid_t pid) const {
    return std::string(std::getenv("CUSNAP_CONTROL_DIR")) + "/" + std::to_string(pid) + ".held";
  }
};

TEST_F(CliJobHold, CheckpointStopsEveryParticipantAndRestoreContinuesThem) {
  Worker& creator = StartFilled("creator", 4, "0,1");
  ASSERT_FALSE(HasFailure());
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(Share(creator, "A", importer));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "a", "A", 0, 4, "1"));
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
  EXPECT_THAT(st.out, HasSubstr(" released     held: stopped by 'cusnap checkpoint' until "
                                "'cusnap restore' continues it (CUSNAP_HOLD=run keeps it "
                                "running); its tables were not asked"));
  const auto doc = nlohmann::json::parse(st_json.out);
  ASSERT_EQ(doc["participants"].size(), 2u);
  for (const auto& p : doc["participants"]) {
    EXPECT_EQ(p["phase"], "released") << p.dump();
    EXPECT_EQ(p["held"], true) << p.dump();
  }

  // A second checkpoint cannot reach the held endpoints: refused, the job stays held.
  const Ran again = Checkpoint(dir_ + "/state2");
  EXPECT_EQ(again.status, kExitRefused) << again.out << again.err;
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
  EXPECT_EQ(ck.status, 1);
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
