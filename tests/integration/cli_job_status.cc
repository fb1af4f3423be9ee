// What `cusnap status --pid` says when it cannot show the job asked for, through the real
// `cusnap` (simulated driver, job_worker processes): a process without the shim and a shim
// serving its endpoint in another control directory exit 1 naming why (and that directory);
// a checkpointed job shows where its checkpoint is, and one whose participant was killed
// names the missing participant and exits 1; `restore` without --state-dir names the
// checkpoint's state directory instead of failing on ./cusnap-state; a killed participant's
// checkpoint pointer is stale, and --prune removes it.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using CliJobStatus = JobTest;

TEST_F(CliJobStatus, AProcessWithoutTheShimExits1NamingWhy) {
  Worker& bare = Start("bare", 0, /*bare=*/true);
  const std::string control = cusnap::testing::Env("CUSNAP_CONTROL_DIR");
  const Ran st = Cusnap({"status", "--pid", std::to_string(bare.pid)});
  EXPECT_EQ(st.status, 1) << st.out << st.err;
  EXPECT_EQ(st.err, "cusnap status: pid " + std::to_string(bare.pid) + ": no process in its "
                    "tree has a cusnap endpoint in " + control + "; start the job with "
                    "'cusnap run'\n");
  EXPECT_EQ(st.out, "");
}

TEST_F(CliJobStatus, AnotherControlDirectoryExits1NamingTheOneTheShimUses) {
  Worker& w = Start("worker", 0);
  const std::string control = cusnap::testing::Env("CUSNAP_CONTROL_DIR");
  const std::string other = dir_ + "/other-control";
  ASSERT_EQ(::mkdir(other.c_str(), 0700), 0);
  const auto st = cusnap::testing::RunCommand(
      "CUSNAP_CONTROL_DIR=" + other + " " + cusnap::testing::Env("CUSNAP_TEST_BIN_DIR") +
          "/cusnap status --pid " + std::to_string(w.pid),
      dir_);
  EXPECT_EQ(st.status, 1) << st.out << st.err;
  EXPECT_THAT(st.err, HasSubstr("cusnap status: pid " + std::to_string(w.pid) + ": no process "
                                "in its tree has a cusnap endpoint in " + other + "; "));
  EXPECT_THAT(st.err, HasSubstr("its environment puts its endpoint in " + control + ", not in " +
                                other));
  EXPECT_THAT(st.err, HasSubstr("run the command with CUSNAP_CONTROL_DIR=" + control + "\n"));
}

TEST_F(CliJobStatus, ACheckpointedJobShowsItsStateDirectoryAndAMissingParticipant) {
  Worker& creator = Start("creator", 0);
  Worker& other = Start("other", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 2, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(other, "B", 2, "dev", 1, "b", "1"));
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;

  Ran st = Cusnap({"status", "--pid", PidArg()});
  EXPECT_EQ(st.status, 0) << st.out << st.err;
  EXPECT_THAT(st.out, HasSubstr("\ncheckpoint: " + state + "\n"));
  EXPECT_THAT(st.out, Not(HasSubstr("missing participant")));
  Ran js = Cusnap({"status", "--pid", PidArg(), "--json"});
  ASSERT_EQ(js.status, 0) << js.err;
  auto doc = nlohmann::json::parse(js.out);
  EXPECT_EQ(doc["checkpoints"],
            nlohmann::json::parse(R"([{"state_dir": ")" + state +
                                  R"(", "missing_participants": []}])"));

  const int gone = other.pid;
  Kill(other);
  st = Cusnap({"status", "--pid", PidArg()});
  EXPECT_EQ(st.status, 1) << st.out << st.err;
  EXPECT_THAT(st.out, HasSubstr("\ncheckpoint: " + state + "\nmissing participant: pid " +
                                std::to_string(gone) + ", recorded by that checkpoint, no longer "
                                "runs\n"));
  EXPECT_THAT(st.err, HasSubstr("cusnap status: pid " + std::to_string(gone) + ", a participant "
                                "of the checkpoint in " + state + ", no longer runs\n"));
  js = Cusnap({"status", "--pid", PidArg(), "--json"});
  EXPECT_EQ(js.status, 1);
  doc = nlohmann::json::parse(js.out);
  EXPECT_EQ(doc["checkpoints"][0]["missing_participants"], nlohmann::json::array({gone}));

  // The killed participant's checkpoint pointer is stale: listed, and removed by --prune; the
  // live one's stays.
  const std::string control = cusnap::testing::Env("CUSNAP_CONTROL_DIR");
  const std::string pointer = control + "/" + std::to_string(gone) + ".checkpoint";
  st = Cusnap({"status"});
  EXPECT_THAT(st.out, HasSubstr("stale checkpoint pointer " + pointer + ": the checkpointed "
                                "process it names ended (safe to remove)\n"));
  st = Cusnap({"status", "--prune"});
  EXPECT_THAT(st.out, HasSubstr("stale checkpoint pointer " + pointer + ": the checkpointed "
                                "process it names ended (removed)\n"));
  struct stat info {};
  EXPECT_NE(::stat(pointer.c_str(), &info), 0);
  EXPECT_EQ(::stat((control + "/" + std::to_string(creator.pid) + ".checkpoint").c_str(), &info), 0);

  const Ran rs = Cusnap({"restore", "--all", "--state-dir", state});
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  st = Cusnap({"status", "--pid", PidArg()});
  EXPECT_EQ(st.status, 0) << st.out << st.err;
  EXPECT_THAT(st.out, Not(HasSubstr("checkpoint: ")));
}

TEST_F(CliJobStatus, RestoreWithoutStateDirNamesTheCheckpointsOne) {
  Worker& w = Start("worker", 0);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(w, "A", 2, "dev", 0, "a", "0"));
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  const auto rs = cusnap::testing::RunCommand(
      "cd " + dir_ + " && " + cusnap::testing::Env("CUSNAP_TEST_BIN_DIR") +
          "/cusnap restore --pid " + PidArg(),
      dir_);
  EXPECT_EQ(rs.status, 5) << rs.out << rs.err;
  EXPECT_EQ(rs.err, "cusnap restore: no checkpoint in ./cusnap-state; the job's checkpoint is "
                    "in " + state + ": run 'cusnap restore --pid " + PidArg() + " --state-dir " +
                    state + "'\ncusnap restore: refused; nothing was changed\n");
  // Moved away since: the advice says so, and names recover.
  const std::string moved = dir_ + "/moved";
  ASSERT_EQ(::rename(state.c_str(), moved.c_str()), 0);
  const Ran gone = Restore(dir_ + "/nowhere");
  EXPECT_EQ(gone.status, 5) << gone.out << gone.err;
  EXPECT_THAT(gone.err, HasSubstr("the job's checkpoint was in " + state + ", which holds no "
                                  "state file now: run 'cusnap restore "));
  EXPECT_THAT(gone.err, HasSubstr("or 'cusnap recover "));
  const Ran again = Restore(moved);
  ASSERT_EQ(again.status, 0) << again.out << again.err;
  CheckEveryByte();
}

}  // namespace
}  // namespace jobtest
