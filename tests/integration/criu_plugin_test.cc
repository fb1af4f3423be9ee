// libcusnap_criu.so as CRIU loads it (src/criu_plugin): a plain `criu dump` and `criu restore`
// of criu_job (two processes that share GPU memory, under `cusnap run`) with the plugin's
// folder as CRIU's plugin directory (-L), the way every container engine runs CRIU. Every
// byte is checked by the job itself once restored; refusals and failures must leave the job
// running as it was, named in CRIU's log. CRIU comes from scripts/fetch_criu.sh (or
// CUSNAP_CRIU, or PATH); these run on the release build (scripts/test.sh), as CRIU cannot dump
// sanitised processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
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

// Dumped by a plain `criu dump` (the job checkpointed in the plugin's init, its carriers in
// CRIU's images directory, the manifest at exit), restored by `criu restore` (checked before
// anything is restored, every restore phase once CRIU released the tasks), then the restored
// job again: every byte read back by the job itself.
TEST_F(CriuPlugin, PlainCriuDumpsAndRestoresAJobTwiceWithEveryByte) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  for (const std::string images : {"images1", "images2"}) {
    const Ran dump = Dump(images);
    ASSERT_EQ(dump.status, 0) << dump.err << Log(images, "dump");
    const std::string dumped = Log(images, "dump");
    EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: release "));
    EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: write_carriers "));
    EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: hand_over_to_criu "));
    EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: dump-end: the manifest lists every image file"));
    const std::string dir = dir_ + "/" + images;
    auto manifest = coord::ReadManifest(dir);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    EXPECT_EQ(manifest->participants.size(), 2u);
    EXPECT_EQ(manifest->root_pid, root_);
    EXPECT_TRUE(std::filesystem::exists(dir + "/carrier-" + std::to_string(root_) + "-0.bin"));
    ASSERT_NO_FATAL_FAILURE(AwaitJobGone());

    const Ran restore = Restore(images);
    ASSERT_EQ(restore.status, 0) << restore.err << Log(images, "restore");
    const std::string restored = Log(images, "restore");
    EXPECT_THAT(restored, HasSubstr("cusnap_criu: cusnap: check_images "));
    EXPECT_THAT(restored, HasSubstr("cusnap_criu: cusnap: reallocate "));
    EXPECT_THAT(restored, HasSubstr("cusnap_criu: cusnap: activate "));
    EXPECT_THAT(restored, Not(HasSubstr("Error: cusnap_criu")));
    EXPECT_EQ(ReadAll(dir_ + "/restored.pid"), std::to_string(root_));
  }
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// `--leave-running` (Podman's, and the kubelet's checkpoint, which always leaves the container
// running): the job goes on in place once CRIU ended, and the images restore it later.
TEST_F(CriuPlugin, ALeaveRunningDumpGoesOnInPlaceAndItsImagesRestoreTheJob) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran dump = Dump("images", "--leave-running");
  ASSERT_EQ(dump.status, 0) << dump.err << Log("images", "dump");
  ASSERT_NO_FATAL_FAILURE(AwaitActive());
  for (const int pid : coord::ProcessTree(root_)) ::kill(pid, SIGKILL);
  ASSERT_NO_FATAL_FAILURE(AwaitJobGone());
  RestoreWithEveryByte("images");
}

// CRIU fails after the plugin checkpointed the job (here: a freezer cgroup that does not
// exist, met once the root was paused): the dump fails, its files go, and the job comes back
// in place with every byte.
TEST_F(CriuPlugin, ACriuThatFailsAfterTheCheckpointLeavesTheJobRunningInPlace) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran dump = Dump("images", "--freeze-cgroup /sys/fs/cgroup/freezer/no-such-cusnap-group");
  EXPECT_NE(dump.status, 0);
  const std::string dumped = Log("images", "dump");
  EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: release "));
  EXPECT_THAT(dumped, HasSubstr("dump-end: CRIU failed"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive());
  EXPECT_FALSE(coord::HasManifest(dir_ + "/images"));
  EXPECT_FALSE(coord::HasPendingManifest(dir_ + "/images"));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// Modes that cannot move GPU memory are refused by name before anything changes.
TEST_F(CriuPlugin, APreDumpOfAJobIsRefusedAndTheJobRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran pre = Criu("pre-dump", "images", "-t " + std::to_string(root_));
  EXPECT_NE(pre.status, 0);
  const std::string log = Log("images", "pre-dump");
  EXPECT_THAT(log, HasSubstr("criu pre-dump cannot take a cusnap job"));
  EXPECT_THAT(log, HasSubstr("refused; nothing was changed"));
  const Ran status = Cusnap({"status", "--pid", std::to_string(root_)});
  EXPECT_EQ(CountText(status.out, " active "), 2u) << status.out << status.err;
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// A job checkpointed in place by `cusnap checkpoint`, held stopped (cusnap's default hold)
// and then held running (CUSNAP_HOLD=run), met by CRIU: refused at once (a dump would find a
// stopped job in a frozen cgroup and wait for ever), named; the job is restored by cusnap as
// usual afterwards.
TEST_F(CriuPlugin, AJobCheckpointedInPlaceIsRefusedAndRestoresAfter) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string pid = std::to_string(root_), state = dir_ + "/state";
  for (const std::string hold : {"stop", "run"}) {
    ::setenv("CUSNAP_HOLD", hold.c_str(), 1);
    const Ran checkpoint = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
    ::unsetenv("CUSNAP_HOLD");
    ASSERT_EQ(checkpoint.status, 0) << hold << checkpoint.out << checkpoint.err;
    const Ran dump = Dump("images-" + hold);
    EXPECT_NE(dump.status, 0);
    EXPECT_THAT(Log("images-" + hold, "dump"), HasSubstr("cusnap_criu: cusnap: cusnap dump: "));
    EXPECT_THAT(Log("images-" + hold, "dump"), HasSubstr("Failed in init(0) of \"cusnap_criu\""));
    const Ran restore = Cusnap({"restore", "--pid", pid, "--state-dir", state});
    ASSERT_EQ(restore.status, 0) << hold << restore.out << restore.err;
  }
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// A carrier file changed before the restore: CRIU's restore fails in the plugin's init, before
// any process is restored, naming the file; the images stay as they were, and restore once
// the file is back.
TEST_F(CriuPlugin, AChangedCarrierFileStopsTheRestoreBeforeAnyProcessRuns) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  ASSERT_NO_FATAL_FAILURE(DumpAndAwaitGone("images"));
  const std::string carrier = dir_ + "/images/carrier-" + std::to_string(root_) + "-0.bin";
  const std::string bytes = ReadAll(carrier);
  std::string changed = bytes;
  changed[changed.size() / 2] ^= 1;
  WriteAll(carrier, changed);
  const Ran refused = Restore("images");
  EXPECT_NE(refused.status, 0);
  const std::string log = Log("images", "restore");
  EXPECT_THAT(log, HasSubstr("carrier-" + std::to_string(root_) + "-0.bin is corrupt"));
  // The images directory named by its path, not by the descriptor the command was handed.
  EXPECT_THAT(log, HasSubstr(dir_ + "/images/carrier-"));
  EXPECT_THAT(log, Not(HasSubstr("/proc/self/fd/")));
  EXPECT_THAT(log, HasSubstr("Failed in init(2) of \"cusnap_criu\""));
  EXPECT_TRUE(coord::ProcessExited(root_));
  WriteAll(carrier, bytes);
  RestoreWithEveryByte("images");
}

// CRIU without the plugin (an engine where it is not installed): on the simulated driver the
// "GPU" memory is shared memory CRIU copies itself. The restored processes are new to the
// kernel but their shims name the processes they were: cusnap adopts them, and checkpoints
// and restores the job as before.
TEST_F(CriuPlugin, AJobCriuRestoredWithoutThePluginIsAJobCusnapKnows) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string none = dir_ + "/no-plugins";
  std::filesystem::create_directory(none);
  const Ran dump = Criu("dump", "images", "-t " + std::to_string(root_), none);
  ASSERT_EQ(dump.status, 0) << dump.err << Log("images", "dump");
  ASSERT_NO_FATAL_FAILURE(AwaitJobGone());
  ::unlink((dir_ + "/restored.pid").c_str());
  const Ran restore = Criu("restore", "images", "-d --pidfile " + dir_ + "/restored.pid", none);
  ASSERT_EQ(restore.status, 0) << restore.err << Log("images", "restore");
  const std::string pid = std::to_string(root_), state = dir_ + "/state";
  const Ran checkpoint = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(checkpoint.status, 0) << checkpoint.out << checkpoint.err;
  EXPECT_THAT(checkpoint.err + checkpoint.out, HasSubstr("was restored by CRIU without cusnap"));
  const Ran again = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// A driver error at a native step of the plugin's checkpoint (SIMCUDA_FAULTS in CRIU's
// environment, which the plugin's command inherits): CRIU's dump fails with cusnap's message
// in its log, and the job runs on as it was, every byte kept.
class CriuPluginDumpFault : public CriuPlugin, public ::testing::WithParamInterface<const char*> {};

TEST_P(CriuPluginDumpFault, FailsTheDumpAndTheJobRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  ::setenv("SIMCUDA_FAULTS", (std::string(GetParam()) + ":1:999").c_str(), 1);
  const Ran dump = Dump("images");
  ::unsetenv("SIMCUDA_FAULTS");
  EXPECT_NE(dump.status, 0);
  const std::string log = Log("images", "dump");
  EXPECT_THAT(log, HasSubstr("Error: cusnap_criu: cusnap criu-plugin dump failed"));
  EXPECT_THAT(log, HasSubstr("CUDA_ERROR_UNKNOWN (999)"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive());
  ExpectEveryByteOnceTold(job_dir_, log_);
}

INSTANTIATE_TEST_SUITE_P(NativeSteps, CriuPluginDumpFault,
                         ::testing::Values("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint"));

// A driver error at a native step of the plugin's restore (CRIU has brought the processes
// back, and cannot be failed any more): the processes wait in the shim, CRIU's log names the
// command that finishes the restore, and that command brings every byte back.
class CriuPluginRestoreFault : public CriuPlugin, public ::testing::WithParamInterface<const char*> {};

TEST_P(CriuPluginRestoreFault, IsNamedAndRecoverFinishesTheRestore) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  ASSERT_NO_FATAL_FAILURE(DumpAndAwaitGone("images"));
  ::setenv("SIMCUDA_FAULTS", (std::string(GetParam()) + ":1:999").c_str(), 1);
  const Ran restore = Restore("images");
  ::unsetenv("SIMCUDA_FAULTS");
  const std::string log = Log("images", "restore");
  EXPECT_THAT(log, HasSubstr("CUDA_ERROR_UNKNOWN (999)"));
  EXPECT_THAT(log, HasSubstr("'cusnap recover --pid " + std::to_string(root_) + "' finishes the restore"));
  const Ran recover = Cusnap({"recover", "--pid", std::to_string(root_), "--state-dir", dir_ + "/images"});
  EXPECT_EQ(recover.status, 0) << recover.out << recover.err;
  ExpectEveryByteOnceTold(job_dir_, log_);
}

INSTANTIATE_TEST_SUITE_P(NativeSteps, CriuPluginRestoreFault,
                         ::testing::Values("cuCheckpointProcessRestore", "cuCheckpointProcessUnlock"));

}  // namespace
}  // namespace cusnap::testing
