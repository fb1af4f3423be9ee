// The long-suspend hold (coordinator/participants/hold.h) on real child processes: stopped after the
// native checkpoint with a marker naming it, continued at restore before the native
// restore, and never continued when cusnap did not stop it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "coordinator/participants/hold.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// A child that only sleeps, SIGKILLed and reaped at the end.
class Child {
 public:
  Child() {
    pid_ = ::fork();
    if (pid_ == 0) {
      for (;;) ::pause();
    }
  }
  ~Child() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

/// A native driver that records, for each call, whether the pid was stopped at that moment.
class RecordingDriver final : public CheckpointDriver {
 public:
  explicit RecordingDriver(std::vector<std::string>& log, bool fail_checkpoint = false)
      : log_(log), fail_checkpoint_(fail_checkpoint) {}
  std::string Describe() const override { return "recording"; }
  bool simulated() const override { return true; }
  Result<CUprocessState> GetState(int) override { return CU_PROCESS_STATE_RUNNING; }
  Status Lock(int pid, unsigned) override { return Note("lock", pid); }
  Status Checkpoint(int pid) override {
    if (auto s = Note("checkpoint", pid); !s) return s;
    if (fail_checkpoint_) return Error{CUDA_ERROR_UNKNOWN, "checkpoint failed"};
    return Ok{};
  }
  Status Restore(int pid, std::span<const UuidPair>) override { return Note("restore", pid); }
  Status Unlock(int pid) override { return Note("unlock", pid); }
  Result<std::vector<std::string>> DeviceUuids() override { return std::vector<std::string>{}; }
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override {
    return FreeBytesUnknown(uuid);
  }
  Result<std::vector<std::string>> DeviceNames() override { return std::vector<std::string>{}; }
  bool HoldsStopped() const override { return false; }

 private:
  Status Note(const char* what, int pid) {
    const auto state = ProcessState(pid);
    const bool stopped = state && (*state == 'T' || *state == 't');
    log_.push_back(std::string(what) + (!state ? " gone" : stopped ? " stopped" : " running"));
    return Ok{};
  }
  std::vector<std::string>& log_;
  bool fail_checkpoint_;
};

class HoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cusnap-hold-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Marker(int pid) const { return dir_.string() + "/" + std::to_string(pid) + ".held"; }
  static bool StoppedNow(int pid) {
    const auto s = ProcessState(pid);
    return s && *s == 'T';
  }
  std::filesystem::path dir_;
};

TEST_F(HoldTest, ParsesTheMode) {
  EXPECT_EQ(*ParseHoldMode(""), HoldMode::kStop);
  EXPECT_EQ(*ParseHoldMode("stop"), HoldMode::kStop);
  EXPECT_EQ(*ParseHoldMode("run"), HoldMode::kRun);
  const auto bad = ParseHoldMode("freeze");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_THAT(bad.error().message, HasSubstr("CUSNAP_HOLD='freeze' is not one of stop, run"));
}

TEST_F(HoldTest, StopsWithAMarkerAndContinues) {
  Child child;
  ASSERT_TRUE(StopHeld(dir_, child.pid()));
  EXPECT_TRUE(StoppedNow(child.pid()));
  EXPECT_TRUE(IsHeld(dir_, child.pid()));
  std::ifstream marker(Marker(child.pid()));
  uint64_t recorded = 0;
  ASSERT_TRUE(marker >> recorded);
  EXPECT_EQ(recorded, *ProcessStartTime(child.pid()));

  ASSERT_TRUE(ContinueHeld(dir_, child.pid()));
  EXPECT_FALSE(StoppedNow(child.pid()));
  EXPECT_FALSE(std::filesystem::exists(Marker(child.pid())));
  EXPECT_FALSE(IsHeld(dir_, child.pid()));
  // A second continue finds no marker: nothing to do.
  EXPECT_TRUE(ContinueHeld(dir_, child.pid()));
}

TEST_F(HoldTest, NeverContinuesWhatCusnapDidNotStop) {
  Child stopped_by_user, reused;
  ASSERT_EQ(::kill(stopped_by_user.pid(), SIGSTOP), 0);
  while (!StoppedNow(stopped_by_user.pid())) ::usleep(1000);
  // A marker that names another process (a reused pid: another start time).
  ASSERT_TRUE(StopHeld(dir_, reused.pid()));
  {
    std::ofstream(Marker(reused.pid()), std::ios::trunc) << *ProcessStartTime(reused.pid()) + 1 << "\n";
  }
  EXPECT_THAT(ContinueHeldJob(dir_, 0), ElementsAre());
  EXPECT_TRUE(StoppedNow(stopped_by_user.pid()));  // no marker: left as the user left it
  EXPECT_TRUE(StoppedNow(reused.pid()));           // the marker named another process
  EXPECT_FALSE(std::filesystem::exists(Marker(reused.pid())));  // stale: removed
  EXPECT_FALSE(IsHeld(dir_, stopped_by_user.pid()));
  ::kill(stopped_by_user.pid(), SIGCONT);
  ::kill(reused.pid(), SIGCONT);
}

TEST_F(HoldTest, ContinuesTheTreeOfTheTarget) {
  Child a, b;
  ASSERT_TRUE(StopHeld(dir_, a.pid()));
  ASSERT_TRUE(StopHeld(dir_, b.pid()));
  // Both are children of this process: its tree holds them.
  EXPECT_THAT(ContinueHeldJob(dir_, ::getpid()), ElementsAre());
  EXPECT_FALSE(StoppedNow(a.pid()));
  EXPECT_FALSE(StoppedNow(b.pid()));
}

TEST_F(HoldTest, DriverStopsAfterTheNativeCheckpointAndContinuesBeforeTheRestore) {
  Child child;
  std::vector<std::string> log;
  auto driver = WithHold(std::make_unique<RecordingDriver>(log), dir_, HoldMode::kStop);
  ASSERT_TRUE(driver->Lock(child.pid(), 0));
  ASSERT_TRUE(driver->Checkpoint(child.pid()));
  EXPECT_TRUE(IsHeld(dir_, child.pid()));
  ASSERT_TRUE(driver->Restore(child.pid(), {}));
  ASSERT_TRUE(driver->Unlock(child.pid()));
  // The native calls all found the process running: the hold is only between them.
  EXPECT_THAT(log, ElementsAre("lock running", "checkpoint running", "restore running",
                               "unlock running"));
  EXPECT_FALSE(std::filesystem::exists(Marker(child.pid())));
}

TEST_F(HoldTest, DriverDoesNotHoldAfterAFailedCheckpointNorInRunMode) {
  Child child;
  std::vector<std::string> log;
  auto failing = WithHold(std::make_unique<RecordingDriver>(log, true), dir_, HoldMode::kStop);
  const auto failed = failing->Checkpoint(child.pid());
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "checkpoint failed");
  EXPECT_FALSE(StoppedNow(child.pid()));

  auto running = WithHold(std::make_unique<RecordingDriver>(log), dir_, HoldMode::kRun);
  ASSERT_TRUE(running->Checkpoint(child.pid()));
  EXPECT_FALSE(StoppedNow(child.pid()));
  EXPECT_FALSE(std::filesystem::exists(Marker(child.pid())));
}

TEST_F(HoldTest, StopOfAGoneProcessFailsWithoutAMarker) {
  int gone = ::fork();
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const auto s = StopHeld(dir_, gone);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ESRCH);
  EXPECT_THAT(s.error().message, HasSubstr("cannot stop it for the hold"));
  EXPECT_FALSE(std::filesystem::exists(Marker(gone)));
}

}  // namespace
}  // namespace cusnap::coord
