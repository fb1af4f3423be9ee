// A Podman container whose entry point is a cusnap job (criu_job: two processes sharing GPU
// memory, under `cusnap run`), checkpointed and restored by Podman itself (runc, which runs
// CRIU with cusnap's plugin, named by the container's org.criu.config annotation). The image
// is localhost/cusnap-base (busybox, scripts/container_tools.sh); the host's libraries and the
// build's bin, lib and simcuda folders are mounted read-only at their own paths, the test's
// scratch directory (control directory, simulated machine, job folder and log) read-write.
// Runs on the release build as root (scripts/test.sh), as the CRIU plugin's tests do.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_runner.h"
#include "criu_job_harness.h"
#include "criu_problem.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Podman : public OwnMachineTest {
 protected:
  Podman() : OwnMachineTest("podman") {}

  void SetUp() override {
    OwnMachineTest::SetUp();
    podman_ = Env("CUSNAP_PODMAN");
    if (podman_.empty()) podman_ = "podman --cgroup-manager=cgroupfs --storage-driver=vfs --runtime=runc";
    name_ = "cusnap-podman-" + std::to_string(::getpid());
    job_dir_ = dir_ + "/job";
    log_ = dir_ + "/job.log";
    ::chmod(dir_.c_str(), 0755);  // the container's root reads the build's folders through it
    std::filesystem::create_directory(job_dir_);
    // CRIU's configuration for this container (runc reads the file the annotation names).
    WriteAll(dir_ + "/criu.conf", "libdir " + Env("CUSNAP_TEST_CRIU_PLUGIN_DIR") + "\n");
  }

  void TearDown() override {
    Sh(podman_ + " rm -f -t 0 " + name_);
    OwnMachineTest::TearDown();
  }

  Ran Sh(const std::string& command) { return RunCommand(command, dir_); }

  /// `podman <args>` with the options this machine needs.
  Ran Pod(const std::string& args) { return Sh(podman_ + " " + args); }

  /// Starts the container: `cusnap run -- criu_job <job> 4`, its output in log_; returns
  /// once both processes said READY. `env`: more " -e NAME=VALUE" options.
  void StartContainer(const std::string& more_env = "") {
    ASSERT_EQ(Pod("image exists localhost/cusnap-base").status, 0)
        << "Podman and its image must be set up here (scripts/container_tools.sh, as root)";
    const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
    const std::string build = std::filesystem::path(bin).parent_path().string();
    // The host's libraries (busybox's image has none; /lib and /lib64 are links into /usr on
    // a merged-/usr system), and the build's folders, read-only at their own paths.
    std::string mounts = " -v /usr/lib:/lib:ro -v /usr/lib64:/lib64:ro";
    for (const std::string& d : {std::string("/usr/lib"), std::string("/usr/lib64"), bin,
                                 build + "/lib", Env("CUSNAP_TEST_SIMCUDA_DIR")}) {
      mounts += " -v " + d + ":" + d + ":ro";
    }
    mounts += " -v " + dir_ + ":" + dir_;
    const std::string env = " -e CUSNAP_DRIVER=sim -e CUSNAP_CONTROL_DIR=" + dir_ +
                            "/control -e SIMCUDA_DIR=" + dir_ + "/sim -e CUSNAP_LOG=warn" + more_env;
    const Ran run = Pod("run -d --name " + name_ + " --annotation org.criu.config=" + dir_ +
                        "/criu.conf --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "
                        "--network=none" + mounts + env + " localhost/cusnap-base sh -c '" +
                        bin + "/cusnap run -- " + bin + "/criu_job " + job_dir_ + " 4 >>" +
                        log_ + " 2>&1'");
    ASSERT_EQ(run.status, 0) << run.err;
    ASSERT_TRUE(AwaitInLog(log_, "READY", 2)) << ReadAll(log_) << Pod("logs " + name_).err;
  }

  /// The container's init (criu_job's root: `sh -c` and `cusnap run` exec it) as this
  /// machine numbers it.
  int HostPid() {
    const Ran pid = Pod("inspect -f '{{.State.Pid}}' " + name_);
    return pid.status == 0 ? std::atoi(pid.out.c_str()) : 0;
  }

  /// `cusnap status --pid <host pid>` (joining the container's namespaces) until both
  /// participants are active.
  void AwaitActive() {
    AwaitBothActive([&] { return Cusnap({"status", "--pid", std::to_string(HostPid())}); });
  }

  /// `podman container checkpoint <options> --export <archive>` (gzip); the archive holds
  /// cusnap's manifest and both participants' carrier files beside CRIU's images.
  void Export(const std::string& archive, const std::string& options) {
    const Ran dump = Pod("container checkpoint --keep " + options + " --compress gzip --export " +
                         archive + " " + name_);
    ASSERT_EQ(dump.status, 0) << dump.err << CriuLogNamedIn(dump.err);
    const Ran listed = Sh("tar -tzf " + archive);
    ASSERT_EQ(listed.status, 0) << listed.err;
    EXPECT_THAT(listed.out, HasSubstr("checkpoint/cusnap-images.json"));
    EXPECT_THAT(listed.out, HasSubstr("checkpoint/carrier-1-0.bin"));  // the root, pid 1
    EXPECT_THAT(listed.out, ::testing::ContainsRegex("checkpoint/carrier-([02-9]|[0-9][0-9]+)-0\\.bin"));
  }

  /// Checkpoints the container into `archive` (Podman's export), removes it and restores it
  /// from the archive.
  void CheckpointRemoveAndImport(const std::string& archive) {
    ASSERT_NO_FATAL_FAILURE(Export(archive, ""));
    ASSERT_EQ(Pod("rm " + name_).status, 0);
    const Ran restore = Pod("container restore --import " + archive);
    ASSERT_EQ(restore.status, 0) << restore.err;
  }

  /// The CRIU log Podman's error output names ("log file: <path>": runc passes on no more of
  /// CRIU's failure than that), its text; "" when none is named.
  std::string CriuLogNamedIn(const std::string& podman_err) {
    const std::string tag = "log file: ";
    const size_t at = podman_err.find(tag);
    EXPECT_NE(at, std::string::npos) << "Podman's output names no CRIU log: " << podman_err;
    if (at == std::string::npos) return "";
    const size_t end = podman_err.find_first_of("\"\n", at);
    return ReadAll(podman_err.substr(at + tag.size(), end - at - tag.size()));
  }

  std::string podman_, name_, job_dir_, log_;
};

// Podman's checkpoint --export, rm, restore --import, twice; then every byte read back by the
// job itself.
TEST_F(Podman, ExportedAndImportedTwiceTheJobKeepsEveryByte) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer());
  ASSERT_NO_FATAL_FAILURE(CheckpointRemoveAndImport(dir_ + "/A.tar.gz"));
  ASSERT_NO_FATAL_FAILURE(CheckpointRemoveAndImport(dir_ + "/B.tar.gz"));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// The job's control directory only inside the container (its /run, not bound from this
// machine): the plugin's restore does not look for it here (runc has CRIU restore the
// container's mounts, the directory among them), and the imported job keeps every byte.
TEST_F(Podman, AControlDirectoryOnlyInsideTheContainerComesBackWithIt) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer(" -e CUSNAP_CONTROL_DIR=/run/cusnap-" + name_));
  ASSERT_FALSE(std::filesystem::exists("/run/cusnap-" + name_)) << "not on this machine";
  ASSERT_NO_FATAL_FAILURE(CheckpointRemoveAndImport(dir_ + "/A.tar.gz"));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// `podman container checkpoint --leave-running` (the kubelet's checkpoint): the job goes on in
// place, active again (`cusnap status --pid <host pid>` joins the container's namespaces), with
// every byte.
TEST_F(Podman, ALeaveRunningCheckpointLeavesTheJobActive) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer());
  ASSERT_NO_FATAL_FAILURE(Export(dir_ + "/A.tar.gz", "--leave-running"));
  ASSERT_NO_FATAL_FAILURE(AwaitActive());
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// A job cusnap refuses (the child holds an untracked import): Podman's checkpoint fails, its
// output naming CRIU's log (runc passes on no more) and that log cusnap's refusal, and the job runs on with every byte.
TEST_F(Podman, AJobCusnapRefusesFailsTheCheckpointByNameAndRunsOn) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer(" -e CRIU_JOB_UNTRACKED=1"));
  const Ran dump = Pod("container checkpoint --keep " + name_);
  EXPECT_NE(dump.status, 0);
  const std::string log = CriuLogNamedIn(dump.err);
  EXPECT_THAT(log, HasSubstr("was imported from a descriptor that is not a cusnap ticket"));
  EXPECT_THAT(log, HasSubstr("refused; nothing was changed"));
  EXPECT_THAT(log, HasSubstr("Failed in init(0) of \"cusnap_criu\""));
  ASSERT_NO_FATAL_FAILURE(AwaitActive());
  ExpectEveryByteOnceTold(job_dir_, log_, "12582912");
}

// A carrier file removed from the exported archive, then one changed: Podman's restore
// --import is refused, CRIU's log (kept with --keep, named in Podman's output) naming the
// file, nothing restored; the unchanged archive restores the
// job with every byte afterwards.
TEST_F(Podman, AnArchiveWithACarrierRemovedOrChangedIsRefusedAndTheUnchangedOneRestores) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer());
  const std::string archive = dir_ + "/A.tar.gz";
  ASSERT_NO_FATAL_FAILURE(Export(archive, ""));
  ASSERT_EQ(Pod("rm " + name_).status, 0);
  const std::string tree = dir_ + "/unpacked", carrier = "checkpoint/carrier-1-0.bin";
  std::filesystem::create_directory(tree);
  ASSERT_EQ(Sh("tar -xzf " + archive + " -C " + tree).status, 0);
  const std::string bytes = ReadAll(tree + "/" + carrier);
  ASSERT_FALSE(bytes.empty());
  std::filesystem::remove(tree + "/" + carrier);
  ASSERT_EQ(Sh("tar -czf " + dir_ + "/removed.tar.gz -C " + tree + " .").status, 0);
  std::string changed = bytes;
  changed[changed.size() / 2] ^= 1;
  WriteAll(tree + "/" + carrier, changed);
  ASSERT_EQ(Sh("tar -czf " + dir_ + "/changed.tar.gz -C " + tree + " .").status, 0);
  for (const std::string tampered : {"removed", "changed"}) {
    const Ran refused = Pod("container restore --keep --import " + dir_ + "/" + tampered + ".tar.gz");
    EXPECT_NE(refused.status, 0) << tampered;
    const std::string log = CriuLogNamedIn(refused.err);
    EXPECT_THAT(log, HasSubstr("/carrier-1-0.bin is " +
                               std::string(tampered == "removed" ? "missing" : "corrupt")));
    EXPECT_THAT(log, HasSubstr("cusnap restore: refused; nothing was changed"));
    EXPECT_THAT(log, HasSubstr("Failed in init(2) of \"cusnap_criu\""));
    EXPECT_THAT(log, Not(HasSubstr("Restore finished successfully")));
    Pod("rm -f -t 0 " + name_);
  }
  const Ran restore = Pod("container restore --import " + archive);
  ASSERT_EQ(restore.status, 0) << restore.err;
  ExpectEveryByteOnceTold(job_dir_, log_);
}

// A job checkpointed in place by `cusnap checkpoint` run on the host against the container's
// pid (it joins the container's namespaces), held stopped (the default; the container's init,
// which no signal from inside its namespace stops, is held running) or running, then met by
// Podman's checkpoint: refused at once by name, never a hang; `cusnap restore` run on the host
// brings the job back with every byte.
class PodmanHeld : public Podman, public ::testing::WithParamInterface<const char*> {};

TEST_P(PodmanHeld, CheckpointIsRefusedByNameAndCusnapRestoresTheJob) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartContainer());
  const std::string pid = std::to_string(HostPid()), state = dir_ + "/state";
  ::setenv("CUSNAP_HOLD", GetParam(), 1);
  const Ran checkpoint = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  ::unsetenv("CUSNAP_HOLD");
  ASSERT_EQ(checkpoint.status, 0) << checkpoint.out << checkpoint.err;
  const Ran dump = Pod("container checkpoint --keep " + name_);
  EXPECT_NE(dump.status, 0);
  const std::string log = CriuLogNamedIn(dump.err);
  EXPECT_THAT(log, HasSubstr("cusnap_criu: cusnap: cusnap dump: "));
  EXPECT_THAT(log, HasSubstr("Failed in init(0) of \"cusnap_criu\""));
  const Ran restore = Cusnap({"restore", "--pid", pid, "--state-dir", state});
  ASSERT_EQ(restore.status, 0) << restore.out << restore.err;
  ExpectEveryByteOnceTold(job_dir_, log_);
}

INSTANTIATE_TEST_SUITE_P(Holds, PodmanHeld, ::testing::Values("stop", "run"));

}  // namespace
}  // namespace cusnap::testing
