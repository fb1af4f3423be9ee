// What a restore says when the job lost memory for good, through the real `cusnap`
// (simulated driver, job_worker processes through `cusnap run`): the creator of memory an
// importer maps is killed after the checkpoint; `restore --all` brings the importer back
// without it and its last line names what was lost (the creator's own memory, the
// allocation the importer can no longer map), never claiming every byte.
#include <gmock/gmock.h>

#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

using CliJobLost = JobTest;

TEST_F(CliJobLost, RestoreWithoutAnExitedCreatorNamesWhatWasLostLast) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 2, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "A", importer, "ai", 2, "1"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(importer, "B", 2, "dev", 1, "b", "1"));
  const std::string state = dir_ + "/state";
  (void)Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const std::string creator_pid = "pid " + std::to_string(creator.pid);
  Kill(creator);

  const Ran rs = Cusnap({"restore", "--all", "--state-dir", state});
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(rs.out, EndsWith("\n"));
  const std::string last = rs.out.substr(rs.out.rfind('\n', rs.out.size() - 2) + 1);
  EXPECT_THAT(last, HasSubstr("restore: the job runs without what it lost: " + creator_pid +
                              "'s own memory (it exited); allocation "));
  EXPECT_THAT(last, HasSubstr("created by " + creator_pid + " (exited), cannot come back: pid " +
                              std::to_string(importer.pid) + "'s mappings of it stay unmapped: [0x"));
  EXPECT_THAT(rs.out + rs.err, Not(HasSubstr("every byte intact")));
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  EXPECT_EQ(Ask(importer, "check b " + std::to_string(seeds_.at("B"))), "ok");
}

}  // namespace
}  // namespace jobtest
