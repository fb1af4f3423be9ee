// The checkpoint as a transaction, through the real `cusnap` (simulated driver, job_worker
// processes through `cusnap run`): nothing destructive happens until every participant
// saved and the state file is durable. A save that fails in one participant, or a state file
// that cannot be written (a full filesystem), resumes every participant: exit 3, every shim
// ACTIVE, every byte intact, the job running and checkpointable. A restore refuses a state
// file that is not the job's current checkpoint (replaced by an older one, or deleted).
#include <gmock/gmock.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CliJobTransaction : public JobTest {
 protected:
  /// A creator of two allocations (device 0) sharing both with an importer (device 1).
  void StartJob() {
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    for (const char* name : {"A", "B"}) {
      const std::string view = std::string(1, static_cast<char>(name[0] + 32));  // "a", "b"
      ASSERT_NO_FATAL_FAILURE(Create(*creator_, name, 2, "dev", 0));
      ASSERT_NO_FATAL_FAILURE(Map(*creator_, view, name, 0, 2, "0,1"));
      ASSERT_NO_FATAL_FAILURE(Fill(*creator_, view));
      ASSERT_NO_FATAL_FAILURE(Share(*creator_, name, *importer_));
      ASSERT_NO_FATAL_FAILURE(Map(*importer_, view + "i", name, 0, 2, "1"));
    }
  }

  /// The job runs on as it was: every shim ACTIVE, every byte intact, writes still cross.
  void ExpectRunningUntouched(const std::string& state) {
    EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
    EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
    CheckEveryByte();
    CrossWrite(*creator_, "a", *importer_, "ai");
    EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
  }

  static std::string CheckpointIdIn(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in, nullptr, false).value("checkpoint_id", "");
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
};

// One participant's save fails (its carrier's first device-to-host copy): the other one
// saved already; both resume, nothing is released, and the next checkpoint works.
TEST_F(CliJobTransaction, SaveFailureInOneParticipantResumesEveryone) {
  ::setenv("SIMCUDA_FAULTS", "cuMemcpyDtoHAsync:1:700", 1);  // CUDA_ERROR_ILLEGAL_ADDRESS
  creator_ = &Start("creator", 0);
  ::unsetenv("SIMCUDA_FAULTS");
  importer_ = &Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(Create(*creator_, "A", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(*creator_, "a", "A", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "a"));
  ASSERT_NO_FATAL_FAILURE(Share(*creator_, "A", *importer_));
  ASSERT_NO_FATAL_FAILURE(Map(*importer_, "ai", "A", 0, 2, "1"));
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("pid " + std::to_string(creator_->pid) + ": save failed: "));
  EXPECT_THAT(ck.err, HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  EXPECT_THAT(ck.out, HasSubstr("\nresume "));
  EXPECT_THAT(ck.out, ::testing::Not(HasSubstr("\nrelease ")));
  ExpectRunningUntouched(state);
  Cycle(state);
}

// A filesystem that fills between validation and write_state: the state file's bytes do not
// fit. Every participant resumes; once space is freed the
// same state directory takes a checkpoint.
TEST_F(CliJobTransaction, FullFilesystemAtWriteStateResumesEveryone) {
  const std::string state = dir_ + "/full";
  fs::create_directory(state);
  if (::mount("tmpfs", state.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{state};
  ASSERT_NO_FATAL_FAILURE(StartJob());
  {
    std::ofstream filler(state + "/filler", std::ios::binary);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64 && filler.write(block.data(), block.size()); ++i) filler.flush();
  }
  // The disk check at validate would refuse this directory before anything is saved (a
  // full disk is caught there: CliJobRefusal.StateDirectoryFull); here the space goes after
  // validation, so the check is told there is room (its test knob) and the write fails.
  ASSERT_EQ(::setenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES", "1073741824", 1), 0);
  struct Unset {
    ~Unset() { ::unsetenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES"); }
  } unset;
  const Ran ck = Checkpoint(state);
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  EXPECT_THAT(ck.err, HasSubstr("the state file could not be written: cannot "));
  EXPECT_THAT(ck.err, HasSubstr("No space left on device; nothing was released"));
  EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  ExpectRunningUntouched(state);
  for (const auto& entry : fs::directory_iterator(state)) {
    EXPECT_EQ(entry.path().filename(), "filler") << "a temporary file was left behind";
  }
  fs::remove(state + "/filler");
  Cycle(state);
}

// The state file is replaced, while the job is checkpointed, by the job's own file of an
// earlier cycle: restore refuses it naming both checkpoints (exit 5), and a deleted one too;
// the job stays checkpointed, and its own file restores it.
TEST_F(CliJobTransaction, RestoreRefusesAStateFileOfAnotherCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  const Snapshot first = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  fs::copy_file(file, dir_ + "/cycle1.json");
  Resume(state, first);
  const Snapshot second = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  fs::copy_file(file, dir_ + "/cycle2.json");
  const std::string id1 = CheckpointIdIn(dir_ + "/cycle1.json");
  const std::string id2 = CheckpointIdIn(dir_ + "/cycle2.json");
  ASSERT_FALSE(id1.empty());
  ASSERT_NE(id1, id2);

  fs::copy_file(dir_ + "/cycle1.json", file, fs::copy_options::overwrite_existing);
  Ran rs = Restore(state);
  EXPECT_EQ(rs.status, kExitRestoreRefused) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("pid " + std::to_string(creator_->pid) + ": its cusnap "
                                "shim holds checkpoint " + id2 + ", but " + file +
                                " is checkpoint " + id1));
  EXPECT_THAT(rs.err, HasSubstr("refused; nothing was changed"));
  EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "released"));

  fs::remove(file);
  rs = Restore(state);
  EXPECT_EQ(rs.status, kExitRestoreRefused) << rs.out << rs.err;
  EXPECT_THAT(rs.err, HasSubstr("no checkpoint in " + state));
  ExpectSuspended();

  fs::copy_file(dir_ + "/cycle2.json", file);
  Resume(state, second);
}

}  // namespace
}  // namespace jobtest
