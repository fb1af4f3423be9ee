// Refusals of the real `cusnap` on a running job (simulated driver, job_worker processes
// through `cusnap run`). A refused checkpoint exits 3, names the process and the resource,
// writes no state file and leaves the job running untouched: bytes intact, writes still
// cross, every shim ACTIVE, and once the cause is gone a normal cycle succeeds. A refused
// restore exits 5 and changes nothing: the job stays suspended (memory released, shims
// RELEASED, processes CHECKPOINTED) and the right restore then succeeds.
#include <gmock/gmock.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "job_harness.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CliJobRefusal : public JobTest {
 protected:
  /// A creator (device 0) sharing allocation A with an importer (device 1).
  void StartPair() {
    creator_ = &Start("creator", 0);
    importer_ = &Start("importer", 1);
    ASSERT_NO_FATAL_FAILURE(Create(*creator_, "A", 2, "dev", 0));
    ASSERT_NO_FATAL_FAILURE(Map(*creator_, "a", "A", 0, 2, "0"));
    ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "a"));
    ASSERT_NO_FATAL_FAILURE(Share(*creator_, "A", *importer_));
    ASSERT_NO_FATAL_FAILURE(Map(*importer_, "a", "A", 0, 2, "1"));
  }

  /// Checkpoint refused (exit 3) with every one of `reasons` on stderr, before any change.
  Ran ExpectRefused(const std::string& state, const std::vector<std::string>& reasons) {
    const Ran ck = Checkpoint(state);
    EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
    for (const auto& reason : reasons) EXPECT_THAT(ck.err, HasSubstr(reason));
    EXPECT_THAT(ck.err, HasSubstr("refused; nothing was changed, the job keeps running"));
    EXPECT_FALSE(fs::exists(state + "/cusnap-state.json"));
    return ck;
  }

  /// Checkpoint refused (exit 3, nothing changed) because of untracked imports: the stderr
  /// lines about them are exactly `imports` ("pid P: an allocation ...", any order), each
  /// ending in kNotATicket.
  void ExpectUntrackedRefused(const std::string& state, const std::vector<std::string>& imports) {
    const Ran ck = ExpectRefused(state, {});
    std::vector<std::string> named;
    std::istringstream lines(ck.err);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("not a cusnap ticket") != std::string::npos) named.push_back(line);
    }
    std::vector<std::string> expected;
    for (const auto& text : imports) expected.push_back("cusnap checkpoint: " + text + kNotATicket);
    EXPECT_THAT(named, ::testing::UnorderedElementsAreArray(expected)) << ck.err;
  }

  /// "pid <importer>: an allocation " (how each untracked import's line starts).
  std::string ImporterAllocation() const {
    return "pid " + std::to_string(importer_->pid) + ": an allocation ";
  }

  /// The VA range `view` of `w` is mapped at, as the refusal prints it: "0x<start>-0x<end>".
  std::string RangeOf(Worker& w, const std::string& view) {
    std::istringstream info(Ask(w, "info " + view));  // "ok <va> <size> ..."
    std::string ok, va;
    uint64_t size = 0;
    info >> ok >> va >> size;
    EXPECT_EQ(ok, "ok") << w.name << " info " << view;
    char end[32];
    std::snprintf(end, sizeof end, "0x%llx",
                  static_cast<unsigned long long>(std::stoull(va, nullptr, 16) + size));
    return va + "-" + end;
  }

  static constexpr char kNotATicket[] =
      ", was imported from a descriptor that is not a cusnap ticket (fd import outside "
      "cusnap); release it, or export it from a process started with 'cusnap run'";

  /// The job runs as before: every shim ACTIVE, every byte intact, writes cross.
  void ExpectRunningIntact() {
    EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
    CheckEveryByte();
    CrossWrite(*creator_, "a", *importer_, "a");
  }

  /// Restore refused (exit 5) with every one of `reasons` on stderr; the job is still
  /// suspended.
  void ExpectRestoreRefused(const std::string& state, const std::vector<std::string>& reasons) {
    const Ran rs = Restore(state);
    EXPECT_EQ(rs.status, kExitRestoreRefused) << rs.out << rs.err;
    for (const auto& reason : reasons) EXPECT_THAT(rs.err, HasSubstr(reason));
    EXPECT_THAT(rs.err, HasSubstr("cusnap restore: refused; nothing was changed"));
    ExpectSuspended();
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void Spit(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  }

  Worker* creator_ = nullptr;
  Worker* importer_ = nullptr;
  Worker* bare_ = nullptr;  // a worker without the shim, if any
};

// The importer also imports an allocation from a raw descriptor that a process without the
// shim exported (then exited): a live untracked import, named by its size, device and VA
// range.
TEST_F(CliJobRefusal, LiveUntrackedImport) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  Worker& raw = Start("raw-exporter", 0, /*bare=*/true);
  ASSERT_NO_FATAL_FAILURE(Create(raw, "R", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(raw, "r", "R", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(raw, "r"));
  ASSERT_NO_FATAL_FAILURE(Share(raw, "R", *importer_));
  ASSERT_NO_FATAL_FAILURE(Map(*importer_, "r", "R", 0, 2, "1"));
  ASSERT_EQ(Stop(raw), 0);  // the allocation lives on in the importer alone
  const std::string state = dir_ + "/state";
  const std::string range = RangeOf(*importer_, "r");
  ASSERT_NO_FATAL_FAILURE(ExpectUntrackedRefused(
      state, {ImporterAllocation() + "of at least 2097152 bytes on device 0, mapped at " + range}));
  ExpectRunningIntact();
  EXPECT_EQ(RangeOf(*importer_, "r"), range);  // still mapped where it was
  EXPECT_EQ(Ask(*importer_, "check r " + std::to_string(seeds_.at("R"))), "ok");
  EXPECT_EQ(Ask(*importer_, "write r 9 12345"), "ok");
  EXPECT_EQ(Ask(*importer_, "read r 9"), "ok 12345");
  // Once the importer lets go of it, the job checkpoints and restores.
  ASSERT_NO_FATAL_FAILURE(Unmap(*importer_, "r"));
  ASSERT_NO_FATAL_FAILURE(Release(*importer_, "R", /*freed=*/true));
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// Two untracked imports: R (device 0) mapped at two VAs, the second from 2 MiB in, and S
// (host NUMA node 0) not mapped. One line each. R stays an untracked import while it is
// mapped after its handle was released (the driver keeps a mapped allocation alive), and the
// line follows its mappings as they go.
TEST_F(CliJobRefusal, TwoUntrackedImportsMappedTwiceAndNotMapped) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  Worker& raw = Start("raw-exporter", 0, /*bare=*/true);
  ASSERT_NO_FATAL_FAILURE(Create(raw, "R", 4, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(raw, "r", "R", 0, 4, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(raw, "r"));
  ASSERT_NO_FATAL_FAILURE(Create(raw, "S", 2, "host", 0));
  ASSERT_NO_FATAL_FAILURE(Share(raw, "R", *importer_));
  ASSERT_NO_FATAL_FAILURE(Share(raw, "S", *importer_));
  ASSERT_NO_FATAL_FAILURE(Map(*importer_, "r1", "R", 0, 4, "1"));
  ASSERT_NO_FATAL_FAILURE(Map(*importer_, "r2", "R", 2, 2, "1"));
  ASSERT_EQ(Stop(raw), 0);
  const std::string state = dir_ + "/state";
  const std::string r1 = RangeOf(*importer_, "r1");
  const std::string r2 = RangeOf(*importer_, "r2") + " (at offset 2097152)";
  // The ranges are listed in address order.
  const bool r1_first = std::stoull(r1, nullptr, 16) < std::stoull(r2, nullptr, 16);
  const std::string both = r1_first ? r1 + " and " + r2 : r2 + " and " + r1;
  const std::string r_line = ImporterAllocation() + "of at least 4194304 bytes on device 0, ";
  const std::string s_line = ImporterAllocation() + "on host NUMA node 0, not mapped";
  ASSERT_NO_FATAL_FAILURE(ExpectUntrackedRefused(state, {r_line + "mapped at " + both, s_line}));
  ExpectRunningIntact();
  EXPECT_EQ(Ask(*importer_, "write r2 3 777"), "ok");  // r2 starts 2 MiB into R: word 524291
  EXPECT_EQ(Ask(*importer_, "read r1 524291"), "ok 777");
  ASSERT_NO_FATAL_FAILURE(Fill(*importer_, "r1"));  // the pattern again

  ASSERT_NO_FATAL_FAILURE(Release(*importer_, "R", /*freed=*/false));  // still mapped twice
  ASSERT_NO_FATAL_FAILURE(ExpectUntrackedRefused(state, {r_line + "mapped at " + both, s_line}));
  ASSERT_NO_FATAL_FAILURE(Unmap(*importer_, "r1"));
  ASSERT_NO_FATAL_FAILURE(ExpectUntrackedRefused(
      state, {ImporterAllocation() + "of at least 4194304 bytes on device 0, mapped at " + r2,
              s_line}));
  ExpectRunningIntact();
  ASSERT_NO_FATAL_FAILURE(Unmap(*importer_, "r2"));  // R is gone with its last mapping
  device_allocations_.erase("R");
  ASSERT_NO_FATAL_FAILURE(ExpectUntrackedRefused(state, {s_line}));
  ASSERT_NO_FATAL_FAILURE(Release(*importer_, "S", /*freed=*/true));
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// The creator of O released its handle and unmapped it while the importer still maps it: no
// process could bring O back after a restore.
TEST_F(CliJobRefusal, CreatorReleasedHandleAndMappingsWhileImporterMaps) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  ASSERT_NO_FATAL_FAILURE(Create(*creator_, "O", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(*creator_, "o", "O", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "o"));
  ASSERT_NO_FATAL_FAILURE(Share(*creator_, "O", *importer_));
  ASSERT_NO_FATAL_FAILURE(Map(*importer_, "o", "O", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(Unmap(*creator_, "o"));
  ASSERT_NO_FATAL_FAILURE(Release(*creator_, "O", /*freed=*/false));
  const std::string state = dir_ + "/state";
  const std::string creator = "pid " + std::to_string(creator_->pid);
  ExpectRefused(state, {creator + ": allocation ",
                        " of " + creator + " is still held or mapped by pid " +
                            std::to_string(importer_->pid) +
                            ", but its creator released both its handle and its mappings"});
  ExpectRunningIntact();
  EXPECT_EQ(Ask(*importer_, "write o 17 4711"), "ok");
  EXPECT_EQ(Ask(*importer_, "read o 17"), "ok 4711");
  ASSERT_NO_FATAL_FAILURE(Unmap(*importer_, "o"));
  ASSERT_NO_FATAL_FAILURE(Release(*importer_, "O", /*freed=*/true));
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// A CUDA process in the tree was started without the shim: its sharing is unknown.
TEST_F(CliJobRefusal, CudaProcessWithoutEndpoint) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  bare_ = &Start("bare", 0, /*bare=*/true);
  ASSERT_NO_FATAL_FAILURE(Create(*bare_, "P", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(*bare_, "p", "P", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(*bare_, "p"));
  const std::string state = dir_ + "/state";
  ExpectRefused(state, {"pid " + std::to_string(bare_->pid) + " (job_worker): a CUDA process in "
                        "the tree of pid " + PidArg() + " has no cusnap endpoint in " + dir_ +
                        "/control"});
  ExpectRunningIntact();
  ASSERT_EQ(Stop(*bare_), 0);
  device_allocations_.erase("P");
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// The state directory cannot be created: its parent is a regular file (root can write
// anywhere else). Checked before anything changes.
TEST_F(CliJobRefusal, UnwritableStateDirectory) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  Spit(dir_ + "/file", "a regular file\n");
  const std::string state = dir_ + "/file/state";
  ExpectRefused(state, {"cannot create state directory " + state});
  ExpectRunningIntact();
  ASSERT_NO_FATAL_FAILURE(Cycle(dir_ + "/state"));
}

TEST_F(CliJobRefusal, RestoreWithoutStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const std::string elsewhere = dir_ + "/elsewhere";
  ExpectRestoreRefused(elsewhere, {"no checkpoint in " + elsewhere});
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

TEST_F(CliJobRefusal, RestoreFromCorruptStateFile) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const std::string good = Slurp(file);
  Spit(file, good.substr(0, good.size() / 2));  // cut short
  ExpectRestoreRefused(state, {file + ": corrupt state file"});
  auto doc = nlohmann::json::parse(good);  // valid JSON, but a record field of the wrong type
  doc["participants"][0]["records"][0]["kind"] = "allocation?";
  Spit(file, doc.dump());
  ExpectRestoreRefused(state, {file});
  Spit(file, good);
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

// The state file must describe the very processes found now: a recorded start time that
// differs (the pid was reused), a participant missing from the file, one in the file that is
// not running.
TEST_F(CliJobRefusal, RestoreWithDifferentParticipants) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const std::string good = Slurp(file);
  const auto doc = nlohmann::json::parse(good);
  ASSERT_EQ(doc["participants"].size(), 2u);
  const int first = doc["participants"][0]["pid"].get<int>();
  const int second = doc["participants"][1]["pid"].get<int>();

  auto reused = doc;
  reused["participants"][0]["start_time"] = doc["participants"][0]["start_time"].get<uint64_t>() + 7;
  Spit(file, reused.dump(2));
  ExpectRestoreRefused(state, {"pid " + std::to_string(first) +
                                   " is not the process that was checkpointed: it started at tick ",
                               "(pid reused)"});

  auto other_job = doc;  // as if the file came from a job without the second process
  other_job["participants"].erase(1);
  Spit(file, other_job.dump(2));
  ExpectRestoreRefused(state, {"pid " + std::to_string(second) +
                               " is a participant now but is not in the checkpoint"});

  auto gone = doc;  // a recorded process that is not a participant now
  auto ghost = doc["participants"][1];
  ghost["pid"] = 1;
  gone["participants"].push_back(ghost);
  Spit(file, gone.dump(2));
  ExpectRestoreRefused(state, {"pid 1 of the checkpoint is not a participant now"});

  Spit(file, good);
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

}  // namespace
}  // namespace jobtest
