// Faults in the carriers' streaming path through `cusnap dump` and `cusnap restore
// --images-dir` (CUSNAP_TEST_CARRIER_IO_FAULT in criu_job's processes, armed from their start,
// shim/carrier/carrier_file.h; its carriers in 2 MiB chunks, so the root's 4 MiB carrier is
// two units and unit 1 comes mid-stream): each is named with the file, and nothing is lost.
// On the release build with CRIU (scripts/test.sh), as the other images tests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "cli/exit_codes.h"
#include "coordinator/images/carrier_files.h"
#include "cli_runner.h"
#include "criu_job_harness.h"
#include "coordinator/images/manifest.h"

namespace cusnap::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using cli::kExitFailedAfterChange;
using cli::kExitRestoreRefused;

class CliImagesStreaming : public OwnMachineTest {
 protected:
  CliImagesStreaming() : OwnMachineTest("cli-images-streaming") {}

  /// criu_job started in <dir_>/<name> with `fault`; its root's pid.
  pid_t StartWithFault(const std::string& name, const std::string& fault) {
    job_dir_ = dir_ + "/" + name;
    log_ = dir_ + "/" + name + ".log";
    ::setenv("CUSNAP_TEST_CARRIER_IO_FAULT", fault.c_str(), 1);
    ::setenv("CUSNAP_CARRIER_CHUNK_MIB", "2", 1);
    const pid_t job = StartCriuJob(job_dir_, log_);
    ::unsetenv("CUSNAP_TEST_CARRIER_IO_FAULT");
    ::unsetenv("CUSNAP_CARRIER_CHUNK_MIB");
    return job;
  }

  /// Waits (30 s at most) until `job` is gone, reaping what this subreaper got.
  static void AwaitGone(pid_t job) {
    for (int i = 0; i < 600 && ::kill(job, 0) == 0; ++i) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      ::usleep(50'000);
    }
    EXPECT_NE(::kill(job, 0), 0) << "pid " << job << " is still there";
  }

  Ran Dump(pid_t job, const std::string& images) {
    return Cusnap({"dump", "--pid", std::to_string(job), "--images-dir", images});
  }

  std::string job_dir_, log_;
};

// The disk full, or a write error, mid-stream while the save streams the carriers from the
// GPU into their files (before the point of no return): the dump is refused naming the error
// and the carrier file, no carrier file is left, and the job runs on as it was, both
// processes active with every byte.
TEST_F(CliImagesStreaming, AWriteFailingMidStreamIsRefusedByNameAndTheJobRunsOnWithEveryByte) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  for (const std::string fault : {"enospc", "eio"}) {
    SCOPED_TRACE(fault);
    const pid_t job = StartWithFault(fault, "write:" + fault + ":1");
    ASSERT_GT(job, 0);
    const Ran dump = Dump(job, dir_ + "/images-" + fault);
    EXPECT_EQ(dump.status, cli::kExitRefused) << dump.out << dump.err;
    EXPECT_THAT(dump.err, ContainsRegex("writing bytes \\[[0-9]+, [0-9]+\\) of [^ ]*/carrier-" +
                                        std::to_string(job) + "-[0-9]+\\.bin failed: " +
                                        (fault == "enospc" ? "No space left on device"
                                                           : "Input/output error")));
    EXPECT_THAT(dump.err, HasSubstr("refused; nothing was changed, the job keeps running"));
    EXPECT_FALSE(coord::HasManifest(dir_ + "/images-" + fault));
    EXPECT_FALSE(coord::HasCarrierFiles(dir_ + "/images-" + fault));
    AwaitBothActive([&] { return Cusnap({"status", "--pid", std::to_string(job)}); });
    ExpectEveryByteOnceTold(job_dir_, log_);
    AwaitGone(job);
  }
}

// A read error while a carrier is streamed back to the GPU (reallocate, after CRIU brought the
// processes back): the restore is refused naming the file, the processes CRIU restored are ended, and
// the images stay as they were (the fault travels with the processes' memory, so every
// restore of these images meets it). A short read, and a short write, lose nothing.
TEST_F(CliImagesStreaming, AReadErrorIsRefusedByNameAndShortTransfersLoseNothing) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  const pid_t failing = StartWithFault("eio", "read:eio:1");
  ASSERT_GT(failing, 0);
  const std::string images = dir_ + "/images-eio";
  ASSERT_EQ(Dump(failing, images).status, 0);
  AwaitGone(failing);
  const std::string carrier = images + "/carrier-" + std::to_string(failing) + "-0.bin";
  const std::string bytes = ReadAll(carrier);
  const std::string manifest = ReadAll(images + "/" + coord::kManifestFileName);
  const Ran refused = Cusnap({"restore", "--images-dir", images});
  EXPECT_EQ(refused.status, kExitRestoreRefused) << refused.out << refused.err;
  EXPECT_THAT(refused.err, ContainsRegex("reading bytes \\[[0-9]+, [0-9]+\\) of [^ ]*/carrier-" +
                                         std::to_string(failing) + "-[0-9]+\\.bin failed: "
                                         "Input/output error; the saved bytes stay in the files"));
  EXPECT_THAT(refused.out, ContainsRegex("reallocate .*FAILED"));
  EXPECT_THAT(refused.err, HasSubstr("were ended before any of them ran application code again"));
  EXPECT_EQ(ReadAll(carrier), bytes);
  EXPECT_EQ(ReadAll(images + "/" + coord::kManifestFileName), manifest);
  EXPECT_THAT(ReadAll(log_), ::testing::Not(HasSubstr("CHECKED")));
  AwaitGone(failing);

  for (const std::string fault : {"write:short:0", "read:short:1"}) {
    SCOPED_TRACE(fault);
    const std::string name = fault.substr(0, fault.find(':'));
    const pid_t job = StartWithFault(name, fault);
    ASSERT_GT(job, 0);
    const Ran dump = Dump(job, dir_ + "/images-" + name);
    ASSERT_EQ(dump.status, 0) << dump.out << dump.err;
    AwaitGone(job);
    const Ran restore = Cusnap({"restore", "--images-dir", dir_ + "/images-" + name});
    ASSERT_EQ(restore.status, 0) << restore.out << restore.err;
    ExpectEveryByteOnceTold(job_dir_, log_);
  }
}

}  // namespace
}  // namespace cusnap::testing
