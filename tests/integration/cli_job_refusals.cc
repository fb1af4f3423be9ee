// Refusals of the real `cusnap` on a running job (simulated driver, job_worker processes
// through `cusnap run`). A refused checkpoint exits 3, names the process and the resource,
// writes no state file and leaves the job running untouched: bytes intact, writes still
// cross, every shim ACTIVE, and once the cause is gone a normal cycle succeeds. A refused
// restore exits 5 and changes nothing: the job stays suspended (memory released, shims
// RELEASED, processes CHECKPOINTED) and the right restore then succeeds.
#include <gmock/gmock.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "coordinator/record/state_file.h"
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
  /// `document` with its digest made right again: a state file as a checkpoint would have
  /// written it (the refusals below are about what it says, not about a changed file).
  static std::string Sealed(nlohmann::json document) {
    document["digest"] = cusnap::coord::DocumentDigest(document);
    return document.dump(2);
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

// A state file changed after the checkpoint wrote it, its checkpoint id kept (a record's
// address edited): unrefused, every restore would go through the native restore and fail its
// verify, the job changed each time. The restore is refused at read_state,
// nothing changed; `recover` brings the job back from what its processes hold, saying that
// it did not use the file; every byte is there.
TEST_F(CliJobRefusal, AStateFileChangedAfterTheCheckpointIsRefusedBeforeAnythingChanges) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  auto doc = nlohmann::json::parse(Slurp(file));
  auto& record = doc["participants"][0]["records"][0];
  const std::string address = record["address"].get<std::string>();
  record["address"] = address.substr(0, address.size() - 1) + (address.back() == '0' ? "1" : "0");
  Spit(file, doc.dump(2));
  ExpectRestoreRefused(state, {file + ": the state file was changed after the checkpoint wrote "
                               "it (its digest does not match its content)",
                               "'cusnap recover' brings it back from what its processes hold, "
                               "without the file"});
  ExpectRestoreRefused(state, {"its digest does not match"});  // and again: nothing changed
  std::vector<std::string> recover = {"recover"};
  recover.insert(recover.end(), target_.begin(), target_.end());
  recover.insert(recover.end(), {"--state-dir", state});
  const Ran rec = Cusnap(recover);
  ASSERT_EQ(rec.status, 0) << rec.out << rec.err;
  EXPECT_THAT(rec.out + rec.err, HasSubstr("no usable state file"));
  ExpectResumed(before);
  // The unusable file is set aside (kept, renamed), so the next cycle into the same directory
  // is not refused for it.
  EXPECT_THAT(rec.out + rec.err, HasSubstr("the unusable state file was moved to " + file + ".unusable-"));
  EXPECT_FALSE(std::filesystem::exists(file));
  size_t aside = 0;
  for (const auto& entry : std::filesystem::directory_iterator(state)) {
    if (entry.path().filename().string().starts_with("cusnap-state.json.unusable-")) {
      ++aside;
      EXPECT_EQ(Slurp(entry.path().string()), doc.dump(2));
    }
  }
  EXPECT_EQ(aside, 1u);
  const Snapshot again = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  Resume(state, again);
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
  Spit(file, Sealed(reused));
  ExpectRestoreRefused(state, {"pid " + std::to_string(first) +
                                   " is not the process that was checkpointed: it started at tick ",
                               "(pid reused)"});

  auto other_job = doc;  // as if the file came from a job without the second process
  other_job["participants"].erase(1);
  Spit(file, Sealed(other_job));
  ExpectRestoreRefused(state, {"pid " + std::to_string(second) +
                               " is a participant now but is not in the checkpoint"});

  // A recorded process that is not a participant now, alive outside the tree (pid 1, its
  // start time as it is): refused. (One that exited is no refusal: its survivors are
  // recovered without it, cli_job_recover.cc.)
  auto gone = doc;
  auto ghost = doc["participants"][1];
  ghost["pid"] = 1;
  ghost["start_time"] = cusnap::ProcessStartTime(1);
  gone["participants"].push_back(ghost);
  Spit(file, Sealed(gone));
  ExpectRestoreRefused(state, {"pid 1 of the checkpoint is not a participant now"});

  Spit(file, good);
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

/// This process's start time in clock ticks since boot (/proc/self/stat field 22).
uint64_t SelfStartTime() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  return std::stoull(field);
}

/// A state file of a one-process job: `pid` started at `start_time`.
std::string StateOf(int pid, uint64_t start_time) {
  nlohmann::json document{{"format", "cusnap-state"},
                          {"format_version", cusnap::coord::kStateFormatVersion},
                          {"driver", "simulated"},
                          {"created_unix_s", 0},
                          {"checkpoint_id", "0-0000000000000001"},
                          {"participants", {{{"pid", pid},
                                             {"start_time", start_time},
                                             {"gpus", nlohmann::json::array()},
                                             {"saved_bytes", 0},
                                             {"records", nlohmann::json::array()}}}},
                          {"phases", nlohmann::json::array()}};
  document["digest"] = cusnap::coord::DocumentDigest(document);
  return document.dump(2);
}

// The state directory holds another job's checkpoint (its process, this test process, still
// exists): refused, exit 3, the file left as it was. So is a state file that cannot be read.
// Once the other job is gone (same pid, other start time), its file is overwritten.
TEST_F(CliJobRefusal, StateDirectoryOfAnotherJob) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  fs::create_directories(state);
  const std::string other = StateOf(::getpid(), SelfStartTime());
  Spit(file, other);
  Ran ck = Checkpoint(state);
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  EXPECT_EQ(ck.err, "cusnap checkpoint: state directory " + state + " holds the checkpoint of "
                    "another job (pid " + std::to_string(::getpid()) + ", still checkpointed or "
                    "running); restore it first if it is checkpointed, end it if it runs, or "
                    "choose another --state-dir\n"
                    "cusnap checkpoint: refused; nothing was changed, the job keeps running\n");
  EXPECT_EQ(Slurp(file), other);
  ExpectRunningIntact();

  Spit(file, "{]");
  ck = Checkpoint(state);
  EXPECT_EQ(ck.status, kExitRefused) << ck.out << ck.err;
  EXPECT_EQ(ck.err, "cusnap checkpoint: state directory " + state + " already holds a state "
                    "file that cannot be read (" + file + ": corrupt state file (not valid "
                    "JSON)); it is not overwritten: move it away, or choose another "
                    "--state-dir\n"
                    "cusnap checkpoint: refused; nothing was changed, the job keeps running\n");
  EXPECT_EQ(Slurp(file), "{]");
  ExpectRunningIntact();

  Spit(file, StateOf(::getpid(), SelfStartTime() + 1));  // that process is gone
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// A job that is checkpointed already: the refusal (exit 3) says how to restore it, with the
// target and state directory given; the job stays suspended and restores. The phase lines of
// coordinator-only phases carry no participant count; those of the multicast phases say the
// job has no multicast objects.
TEST_F(CliJobRefusal, CheckpointOfACheckpointedJobNamesTheRestore) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  const std::string file = state + "/cusnap-state.json";
  const Snapshot before = Snap();
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());
  const std::regex no_count("(^|\n)write_state +[0-9.]+ ms(\n|  [0-9])");
  EXPECT_TRUE(std::regex_search(ck.out, no_count)) << ck.out;
  const std::regex detach("(^|\n)detach_multicast +[0-9.]+ ms  \\(no multicast objects\\)\n");
  EXPECT_TRUE(std::regex_search(ck.out, detach)) << ck.out;
  EXPECT_THAT(ck.out, HasSubstr("2 participants"));  // the others keep their count

  const std::string recorded = Slurp(file);
  const Ran again = Checkpoint(state);
  EXPECT_EQ(again.status, kExitRefused) << again.out << again.err;
  for (Worker* w : {creator_, importer_}) {
    EXPECT_THAT(again.err, HasSubstr("cusnap checkpoint: pid " + std::to_string(w->pid) +
                                     ": its cusnap shim is released, not active; only a running "
                                     "job can be checkpointed; it is checkpointed: run 'cusnap "
                                     "restore --pid " + PidArg() + " --state-dir " + state + "'\n"));
  }
  EXPECT_EQ(Slurp(file), recorded);
  ExpectSuspended();

  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_TRUE(std::regex_search(rs.out, std::regex("(^|\n)read_state +[0-9.]+ ms\n"))) << rs.out;
  for (const char* phase : {"multicast_create", "multicast_import", "multicast_join", "multicast_bind"}) {
    const std::regex line(std::string("(^|\n)") + phase + " +[0-9.]+ ms  \\(no multicast objects\\)\n");
    EXPECT_TRUE(std::regex_search(rs.out, line)) << phase << "\n" << rs.out;
  }
  EXPECT_EQ(Phases(), std::vector<std::string>(2, "active"));
  CheckEveryByte();
  ExpectSameLayout(before, Snap());
  CrossWrite(*creator_, "a", *importer_, "a");
}

// A process of the tree has an endpoint socket nobody answers on (a stale <pid>.sock, or a
// process started without the shim's listener): checkpoint (exit 3) says what it means and
// what to do; status lists it as stale. Stale sockets of processes that no longer exist are listed
// by status, never an error.
TEST_F(CliJobRefusal, EndpointThatRefusesConnections) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  bare_ = &Start("bare", 0, /*bare=*/true);
  const std::string control = dir_ + "/control";
  // A bound socket that was never listened on: connect() gets ECONNREFUSED.
  const std::string socket = control + "/" + std::to_string(bare_->pid) + ".sock";
  ASSERT_NO_FATAL_FAILURE(BindDeadSocket(socket));
  const std::string meaning = "pid " + std::to_string(bare_->pid) + " (job_worker): its cusnap "
                              "endpoint " + socket + " does not answer (connection refused): "
                              "the process runs without the cusnap shim; start the job with "
                              "'cusnap run'\n";
  ExpectRefused(dir_ + "/state", {"cusnap checkpoint: " + meaning});
  // status --all: a socket nothing listens on while its pid runs is an earlier process's
  // (a shim listens for as long as its process lives), listed as stale, never an error.
  const Ran st = Cusnap({"status", "--all"});
  EXPECT_EQ(st.status, 0) << st.out << st.err;
  EXPECT_THAT(st.out, ::testing::HasSubstr("stale endpoint " + socket + ": ")) << st.out;
  EXPECT_THAT(st.out, ::testing::HasSubstr("(safe to remove)")) << st.out;

  // A socket of a process that no longer exists: listed as stale, status succeeds.
  ASSERT_EQ(::unlink(socket.c_str()), 0);
  const pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const std::string stale = control + "/" + std::to_string(gone) + ".sock";
  ASSERT_NO_FATAL_FAILURE(BindDeadSocket(stale));
  const Ran clean = Cusnap({"status", "--all"});
  EXPECT_EQ(clean.status, 0) << clean.out << clean.err;
  EXPECT_THAT(clean.out, HasSubstr("stale endpoint " + stale + ": its process no longer exists "
                                   "(safe to remove)\n"));
  const Ran json = Cusnap({"status", "--all", "--json"});
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["stale_endpoints"], nlohmann::json::array({stale}));
  ExpectRunningIntact();
  ASSERT_EQ(Stop(*bare_), 0);
  ASSERT_NO_FATAL_FAILURE(Cycle(dir_ + "/state"));
}

// The participant set must be closed: `--pid` of the creator alone leaves out the
// live importer of its allocation (the creator's endpoint remembered who fetched a
// descriptor); `--pid` of the importer alone leaves out its live creator. An importer that
// has exited does not count. Each is refused before anything changes, naming the missing
// process, and the whole job then checkpoints and restores.
TEST_F(CliJobRefusal, PartialJobLeavesOutAnImporterOrACreator) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  Worker& gone = Start("gone", 1);  // imports A too, then exits
  ASSERT_NO_FATAL_FAILURE(Share(*creator_, "A", gone));
  ASSERT_EQ(Stop(gone), 0);
  const std::string state = dir_ + "/state";
  const std::string creator = "pid " + std::to_string(creator_->pid);
  const std::string importer = "pid " + std::to_string(importer_->pid);
  target_ = {"--pid", std::to_string(creator_->pid)};
  const Ran left_out = ExpectRefused(
      state, {"cusnap checkpoint: " + importer + " imported allocation ",
              " of " + creator, " and is still running, but is not a participant of this "
              "checkpoint; checkpoint every process that shares memory together"});
  EXPECT_THAT(left_out.err, ::testing::Not(HasSubstr("pid " + std::to_string(gone.pid) + " ")));
  ExpectRunningIntact();

  target_ = {"--pid", std::to_string(importer_->pid)};
  // Named by a child's pid, the job's creator is left out: the advice names the root or
  // --all (it said to start the creator with 'cusnap run', which it had been).
  ExpectRefused(state, {importer + ": allocation ", " of " + creator,
                        " is imported, but its creator is not a participant; checkpoint every "
                        "process that shares memory together (the job's root with --pid, or "
                        "--all), each started with 'cusnap run' (the creator is " + creator + ")"});
  ExpectRunningIntact();

  target_ = {"--pid", PidArg()};
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

/// Counts what /proc/<pid>/<dir> lists (descriptors of "fd").
size_t CountEntries(pid_t pid, const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry :
       fs::directory_iterator("/proc/" + std::to_string(pid) + "/" + dir)) {
    ++n;
  }
  return n;
}

/// The number after `prefix` in `text`, or -1.
long long NumberAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + prefix.size()));
}

// Resources checked before the first destructive step: the importer's soft
// RLIMIT_NOFILE leaves fewer free descriptors than its restore's one import plus the 16
// spare. Refused, naming the process, the resource, the descriptors needed and available;
// with the limit back the job checkpoints.
TEST_F(CliJobRefusal, TooFewDescriptorsForTheRestore) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  rlimit old{};
  ASSERT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, nullptr, &old), 0);
  const rlimit low{CountEntries(importer_->pid, "fd") + 4, old.rlim_max};
  ASSERT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, &low, nullptr), 0);
  const std::string state = dir_ + "/state";
  const std::string importer = "pid " + std::to_string(importer_->pid);
  const Ran ck = ExpectRefused(
      state, {importer + ": not enough resources for the checkpoint and its "
              "restore: descriptors (RLIMIT_NOFILE): 17 descriptors needed, ",
              " available (1 for the restore's imports + 16 spare)"});
  const long long available = NumberAfter(ck.err, "17 descriptors needed, ");
  EXPECT_GE(available, 0) << ck.err;
  EXPECT_LE(available, 4) << ck.err;
  EXPECT_THAT(ck.err, ::testing::Not(HasSubstr("pid " + std::to_string(creator_->pid) +
                                                ": not enough")));
  ASSERT_EQ(::prlimit(importer_->pid, RLIMIT_NOFILE, &old, nullptr), 0);
  ExpectRunningIntact();
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// The creator's soft RLIMIT_AS leaves 8 MiB of address space, but its carrier must hold the
// 66 MiB it created (A, 2 MiB, and B, 64 MiB): refused, naming the bytes needed and
// available; with the limit back the job checkpoints.
TEST_F(CliJobRefusal, AddressSpaceTooSmallForTheCarrier) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  ASSERT_NO_FATAL_FAILURE(Create(*creator_, "B", 64, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(*creator_, "b", "B", 0, 64, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(*creator_, "b"));
  std::ifstream statm("/proc/" + std::to_string(creator_->pid) + "/statm");
  uint64_t pages = 0;
  statm >> pages;
  ASSERT_GT(pages, 0u);
  rlimit old{};
  ASSERT_EQ(::prlimit(creator_->pid, RLIMIT_AS, nullptr, &old), 0);
  const rlimit low{pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + (8u << 20),
                   old.rlim_max};
  ASSERT_EQ(::prlimit(creator_->pid, RLIMIT_AS, &low, nullptr), 0);
  const std::string state = dir_ + "/state";
  const std::string needed = "address space (RLIMIT_AS): " + std::to_string(66ull << 20) +
                             " bytes needed, ";
  const Ran ck = ExpectRefused(
      state, {"pid " + std::to_string(creator_->pid) + ": not enough resources",
              needed, " available (the carrier's copy of the allocations this process created)"});
  const long long available = NumberAfter(ck.err, needed);
  EXPECT_GE(available, 0) << ck.err;
  EXPECT_LE(available, 8ll << 20) << ck.err;
  ASSERT_EQ(::prlimit(creator_->pid, RLIMIT_AS, &old, nullptr), 0);
  ExpectRunningIntact();
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

// The state directory's filesystem has 4096 bytes free (CUSNAP_TEST_STATE_DIR_FREE_BYTES, the
// coordinator's test-only stand-in for statvfs; mounting a full filesystem needs privileges
// CI does not have): refused before anything changes, naming the directory and the bytes.
TEST_F(CliJobRefusal, StateDirectoryFull) {
  ASSERT_NO_FATAL_FAILURE(StartPair());
  const std::string state = dir_ + "/state";
  ASSERT_EQ(::setenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES", "4096", 1), 0);
  const Ran ck = ExpectRefused(
      state, {"cusnap checkpoint: state directory " + state + ": not enough disk space for the "
              "state file: ", " spare), 4096 available; free some space or choose "
              "another --state-dir"});
  ::unsetenv("CUSNAP_TEST_STATE_DIR_FREE_BYTES");
  const long long needed = NumberAfter(ck.err, "not enough disk space for the state file: ");
  EXPECT_GT(needed, (1ll << 20) + 4096) << ck.err;  // the 1 MiB margin and the file
  ExpectRunningIntact();
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
  // The estimate was not too small: the file written fits in it.
  EXPECT_LT(static_cast<long long>(fs::file_size(state + "/cusnap-state.json")),
            needed - (1ll << 20));
}

}  // namespace
}  // namespace jobtest
