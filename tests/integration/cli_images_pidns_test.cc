// A job restored into a PID namespace of its own is a job like any other: criu_job (two
// processes sharing memory) dumped and restored three times in a row, each restore forced
// into a namespace of its own, from a build folder on a mount other than the root's (a
// tmpfs holding a copy of cusnap, the shim, the simulated driver and the job), every byte
// checked after each restore. Each restore names the job's root as this machine numbers it
// (a stdout line, or JSON keys); that pid (and the namespace's init's) is what the next
// commands are given, and their messages name this machine's pids.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "cli_runner.h"
#include "common/ids.h"
#include "coordinator/images/criu_preconditions.h"
#include "coordinator/images/manifest.h"
#include "coordinator/proc/processes.h"
#include "criu_job_harness.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kRounds = 3;

class CliImagesPidNamespace : public OwnMachineTest {
 protected:
  CliImagesPidNamespace() : OwnMachineTest("images-pidns") {}

  void TearDown() override {
    if (!bin_dir_.empty()) ::setenv("CUSNAP_TEST_BIN_DIR", bin_dir_.c_str(), 1);
    if (!build_.empty()) ::umount2(build_.c_str(), MNT_DETACH);
    OwnMachineTest::TearDown();
  }

  /// The build's cusnap, shim, simulated driver and criu_job copied onto a tmpfs at
  /// <dir_>/build, in a mount namespace of this test's own; CUSNAP_TEST_BIN_DIR names its
  /// bin from here on. False (after a skip or failure) when it cannot be made.
  bool BuildOnAMountOfItsOwn() {
    namespace fs = std::filesystem;
    bin_dir_ = Env("CUSNAP_TEST_BIN_DIR");
    const fs::path from = fs::path(bin_dir_).parent_path();
    const std::string build = dir_ + "/build";
    EXPECT_EQ(::mkdir(build.c_str(), 0700), 0);
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", build.c_str(), "tmpfs", 0, "size=512m,mode=0755") != 0) {
      ADD_FAILURE() << "cannot mount a tmpfs at " << build << ": " << std::strerror(errno);
      return false;
    }
    build_ = build;
    std::error_code ec;
    for (const char* sub : {"bin", "lib", "simcuda"}) fs::create_directory(build + "/" + sub, ec);
    for (const char* file : {"bin/cusnap", "bin/criu_job", "lib/libcusnap.so"}) {
      fs::copy_file(from / file, build + "/" + file, ec);
      EXPECT_FALSE(ec) << file << ": " << ec.message();
    }
    fs::copy(from / "simcuda", build + "/simcuda", fs::copy_options::recursive, ec);
    EXPECT_FALSE(ec) << "simcuda: " << ec.message();
    ::setenv("CUSNAP_TEST_BIN_DIR", (build + "/bin").c_str(), 1);
    return !HasFailure();
  }

  /// Waits until `pid` is gone here (reaping what this subreaper was given), at most 30 s.
  static void AwaitGone(int pid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (KernelStartTime(pid) != 0 && std::chrono::steady_clock::now() < deadline) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(KernelStartTime(pid), 0u) << "pid " << pid << " is still there";
  }

  /// Tells criu_job's processes to check round `round` (<job_dir>/go-<round>); both must pass.
  void ExpectEveryByte(const std::string& job_dir, const std::string& log, int round) {
    WriteAll(job_dir + "/go-" + std::to_string(round), "");
    const std::string which = " round " + std::to_string(round);
    ASSERT_TRUE(AwaitInLog(log, "PASS root 4194304" + which, 1) &&
                AwaitInLog(log, "PASS child 8388608" + which, 1))
        << ReadAll(log);
    EXPECT_THAT(ReadAll(log), ::testing::Not(HasSubstr("FAIL")));
  }

  std::string bin_dir_, build_;
};

TEST_F(CliImagesPidNamespace, ARestoredJobIsDumpedAndRestoredAgainFromABuildOnAnotherMount) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_TRUE(BuildOnAMountOfItsOwn());
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log";
  const pid_t job = StartCriuJob(job_dir, log, kRounds);
  ASSERT_GT(job, 0);
  const std::regex root_line("job root pid (\\d+) \\(pid (\\d+) in its PID namespace\\)");
  const std::regex init_line("its init is pid (\\d+) here");
  std::string root = std::to_string(job), init;
  int job_root = 0;  // the root's pid in its own namespace (the dump's)
  pid_t holder = -1;
  for (int round = 1; round <= kRounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Round 2 names the job by its namespace's init, the pid the restore named first: the
    // job under it is dumped, never the init.
    const std::string named = round == 2 ? init : root;
    const std::string images = dir_ + "/images-" + std::to_string(round);
    const Ran dump = Cusnap({"dump", "--pid", named, "--images-dir", images});
    ASSERT_EQ(dump.status, 0) << dump.out << dump.err;
    if (round == 1) {
      ASSERT_EQ(::waitpid(job, nullptr, 0), job);
    }
    auto manifest = coord::ReadManifest(images);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    if (round > 1) {
      EXPECT_EQ(manifest->root_pid, job_root);
    }
    // The job's processes are gone here (after round 1 the manifest's pids are its
    // namespace's: the holder has the root's here).
    if (round == 1) {
      for (const auto& p : manifest->participants) AwaitGone(p.pid);
    }
    AwaitGone(std::stoi(root));
    if (round == 1) {
      // Another process takes the root's pid: every later restore needs a namespace.
      holder = HoldPid(manifest->root_pid);
      ASSERT_EQ(holder, manifest->root_pid) << std::strerror(errno);
    }
    // Round 3 asks for JSON: its keys name the root here and there.
    const bool json = round == 3;
    std::vector<std::string> restore_args = {"restore", "--images-dir", images, "--pid-namespace"};
    if (json) restore_args.push_back("--json");
    const Ran restore = Cusnap(restore_args);
    ASSERT_EQ(restore.status, 0) << restore.out << restore.err
                                 << ReadAll(images + "/criu-restore.log").substr(0, 4000);
    std::smatch found;
    ASSERT_TRUE(std::regex_search(restore.err, found, init_line)) << restore.err;
    init = found[1];
    if (json) {
      const auto doc = nlohmann::json::parse(restore.out, nullptr, false);
      ASSERT_TRUE(doc.is_object()) << restore.out;
      root = std::to_string(doc.value("root_pid", 0));
      EXPECT_EQ(doc.value("root_pid_in_job_namespace", 0), manifest->root_pid) << restore.out;
    } else {
      ASSERT_TRUE(std::regex_search(restore.out, found, root_line)) << restore.out;
      root = found[1];
      EXPECT_EQ(found[2], std::to_string(manifest->root_pid));
    }
    job_root = manifest->root_pid;
    ASSERT_NE(root, std::to_string(job_root));
    EXPECT_THAT(restore.err, HasSubstr("its root is pid " + std::to_string(job_root) +
                                       " there and pid " + root + " here"));
    // The init runs cusnap from the namespace's own mounts: nothing of it is on a mount its
    // namespace lacks (CRIU could dump it).
    EXPECT_TRUE(coord::FilesOnForeignMounts("/proc/" + init).empty());
    // The pid named is the job's: status and a checkpoint + restore in place take it.
    const Ran st = Cusnap({"status", "--pid", root, "--json"});
    ASSERT_EQ(st.status, 0) << st.out << st.err;
    const auto participants = nlohmann::json::parse(st.out)["participants"];
    EXPECT_EQ(participants.size(), 2u) << st.out;
    // Each named as this machine numbers it, the job's own pid beside it.
    EXPECT_TRUE(std::any_of(participants.begin(), participants.end(), [&](const auto& p) {
      return p.value("pid", 0) == std::stoi(root) && p.value("pid_in_job_namespace", 0) == job_root;
    })) << st.out;
    if (round == 2) {
      const std::string state = dir_ + "/in-place";
      ASSERT_EQ(Cusnap({"checkpoint", "--pid", root, "--state-dir", state}).status, 0);
      const Ran rs = Cusnap({"restore", "--pid", root, "--state-dir", state});
      ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
      EXPECT_THAT(rs.out, HasSubstr("job root pid " + root + " (pid " +
                                    std::to_string(job_root) + " in its PID namespace)"));
    }
    ExpectEveryByte(job_dir, log, round);
  }
  ::kill(std::stoi(root), SIGKILL);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
}

// What cusnap prints about a job in a PID namespace of its own names this machine's pids (the
// job's own beside them): the advice to continue a process stopped by someone else, and the
// restore a second checkpoint points to.
TEST_F(CliImagesPidNamespace, MessagesNameThePidsOfTheCallersNamespace) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const std::string job_dir = dir_ + "/job", log = dir_ + "/job.log", images = dir_ + "/images";
  const pid_t job = StartCriuJob(job_dir, log);
  ASSERT_GT(job, 0);
  ASSERT_EQ(Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images}).status, 0);
  ASSERT_EQ(::waitpid(job, nullptr, 0), job);
  auto manifest = coord::ReadManifest(images);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  for (const auto& p : manifest->participants) AwaitGone(p.pid);
  const Ran restore = Cusnap({"restore", "--images-dir", images, "--pid-namespace"});
  ASSERT_EQ(restore.status, 0) << restore.out << restore.err;
  std::smatch found;
  ASSERT_TRUE(std::regex_search(restore.out, found,
                                std::regex("job root pid (\\d+) \\(pid (\\d+) in its PID")))
      << restore.out;
  const std::string here = found[1], there = found[2];
  ASSERT_NE(here, there);

  // Stopped by someone else: the advice continues the process here.
  ASSERT_EQ(::kill(std::stoi(here), SIGSTOP), 0);
  const Ran stopped = Cusnap({"checkpoint", "--pid", here, "--state-dir", dir_ + "/state"});
  EXPECT_NE(stopped.status, 0) << stopped.out;
  EXPECT_THAT(stopped.err, HasSubstr("pid " + here + " (criu_job; pid " + there +
                                     " in the job's PID namespace) is stopped"));
  EXPECT_THAT(stopped.err, HasSubstr("continue it ('kill -CONT " + here + "')"));
  ASSERT_EQ(::kill(std::stoi(here), SIGCONT), 0);

  // Checkpointed twice (not held: the refusal points to the restore): the restore it points
  // to takes the pid here.
  ::setenv("CUSNAP_HOLD", "run", 1);
  const std::string state = dir_ + "/state-2";
  const Ran first = Cusnap({"checkpoint", "--pid", here, "--state-dir", state});
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  const Ran twice = Cusnap({"checkpoint", "--pid", here, "--state-dir", dir_ + "/state-3"});
  EXPECT_NE(twice.status, 0);
  EXPECT_THAT(twice.err, HasSubstr("run 'cusnap restore --pid " + here));
  EXPECT_THAT(twice.err, ::testing::Not(HasSubstr("--pid " + there + " ")));
  // A restore given another state directory: the one it points to takes the pid here.
  const Ran elsewhere = Cusnap({"restore", "--pid", here, "--state-dir", dir_ + "/state-4"});
  EXPECT_NE(elsewhere.status, 0);
  EXPECT_THAT(elsewhere.err, HasSubstr("run 'cusnap restore --pid " + here + " --state-dir " +
                                       state + "'"));
  // recover takes the pid here too, and brings the job back.
  const Ran back = Cusnap({"recover", "--pid", here, "--state-dir", state});
  ASSERT_EQ(back.status, 0) << back.out << back.err;
  EXPECT_THAT(back.out, HasSubstr("job root pid " + here + " (pid " + there + " in its PID "
                                  "namespace)\n"));
  ExpectEveryByteOnceTold(job_dir, log);
}

}  // namespace
}  // namespace cusnap::testing
