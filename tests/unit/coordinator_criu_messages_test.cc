// What a failed CRIU run says (coordinator/images/criu.h, RunCriu): the lines of its log that
// tell why, and, when its log is empty (a disk that filled up can stop it before its first
// line), that it is, never an empty excerpt.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "coordinator/images/criu.h"
#include "scratch_dir.h"

namespace cusnap::coord {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

class CriuMessages : public cusnap::testing::ScratchDirTest {
 protected:
  CriuMessages() : ScratchDirTest("criu-messages") {}

  /// A stand-in for criu: a shell script running `body`, executable.
  std::string FakeCriu(const std::string& body) {
    const std::string path = dir_ + "/criu";
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), 0700);
    return path;
  }
};

TEST_F(CriuMessages, AnEmptyLogIsSaidToBeEmpty) {
  const std::string criu = FakeCriu(": > \"$5/criu-dump.log\"; exit 1");
  const Status ran = RunCriu(criu, {"dump", "-t", "1", "-D", dir_}, dir_, "criu-dump.log");
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.error().code, 1);
  EXPECT_EQ(ran.error().message, "criu dump failed (exit 1, log " + dir_ + "/criu-dump.log): its "
                                 "log is empty (CRIU wrote no reason)");
}

TEST_F(CriuMessages, ALogsErrorLinesAreQuoted) {
  const std::string criu =
      FakeCriu("echo 'Error (criu/cr-dump.c:1): No space left on device' > \"$5/criu-dump.log\"; "
               "exit 1");
  const Status ran = RunCriu(criu, {"dump", "-t", "1", "-D", dir_}, dir_, "criu-dump.log");
  ASSERT_FALSE(ran.ok());
  EXPECT_THAT(ran.error().message, HasSubstr("criu dump failed (exit 1, log " + dir_ +
                                             "/criu-dump.log): "));
  EXPECT_THAT(ran.error().message, EndsWith("No space left on device"));
}

// CRIU refuses to restore a file the job had open whose size changed since the dump (the
// job's output, written on after a --leave-running dump): its terse line gets what happened
// and what to do.
TEST_F(CriuMessages, AFileOfAnotherSizeIsExplained) {
  const std::string criu = FakeCriu(
      "echo 'Error (criu/files-reg.c:2230): File tmp/job/out has bad size 133 (expect 47)' > "
      "\"$3/criu-restore.log\"; exit 1");
  const Status ran = RunCriu(criu, {"restore", "-D", dir_}, dir_, "criu-restore.log");
  ASSERT_FALSE(ran.ok());
  EXPECT_THAT(ran.error().message, HasSubstr("File tmp/job/out has bad size 133 (expect 47); a "
                                             "file the job had open changed size since the "
                                             "dump"));
  EXPECT_THAT(ran.error().message, EndsWith("put it back as it was, or dump the job again"));
}

}  // namespace
}  // namespace cusnap::coord
