// The state file (coordinator/record/state_file.h): round trip, atomic write, errors for a missing,
// corrupt or foreign file, and the directory preflight.
#include <gmock/gmock.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "coordinator/record/records.h"
#include "coordinator/record/state_file.h"
#include "unit/coordinator_fixtures.h"
#include "unit/coordinator_phases.h"
#include "scratch_dir.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
namespace fs = std::filesystem;

class StateFileTest : public ScratchDirTest {
 protected:
  StateFileTest() : ScratchDirTest("state-test") {}
  void WriteRaw(const std::string& text) {
    std::ofstream(coord::StateFilePath(dir_)) << text;
  }
};

// Read and execute, no write, for the owner and for others (others: the unprivileged user
// AsUnprivileged switches to when the tests run as root).
constexpr fs::perms kReadOnlyDir = fs::perms::owner_read | fs::perms::owner_exec |
                                   fs::perms::others_read | fs::perms::others_exec;

// Runs `attempt` where directory permissions apply: in this process, or, when the tests run
// as root (root ignores directory permissions, as in CI), in a child that became user
// nobody. Returns what `attempt` returned (error code and message travel over a pipe).
Status AsUnprivileged(const std::function<Status()>& attempt) {
  if (::geteuid() != 0) return attempt();
  int fds[2];
  if (::pipe(fds) != 0) return Error{errno, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const Status status = attempt();
    const std::string out =
        status.ok() ? "" : std::to_string(status.error().code) + "\n" + status.error().message;
    const bool sent = ::write(fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    ::_exit(status.ok() ? 0 : (sent ? 1 : 3));
  }
  ::close(fds[1]);
  std::string out;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) > 1) {
    return Error{-1, "the unprivileged child failed (status " + std::to_string(wstatus) + ")"};
  }
  if (WEXITSTATUS(wstatus) == 0) return Ok{};
  const size_t newline = out.find('\n');
  return Error{std::stoi(out.substr(0, newline)), out.substr(newline + 1)};
}

coord::StateFile SampleState() {
  coord::StateFile s;
  s.driver = "simulated";
  s.created_unix_s = 1764489600;
  s.checkpoint_id = "692c9a00-0123456789abcdef";
  auto job = ValidJob();
  proto::Record mc{};
  mc.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastBinding);
  mc.id = Id(100, kStart100, 9);
  mc.member = Id(100, kStart100, 1);
  mc.member_offset = 4096;
  mc.size = kMiB2;
  mc.bind_kind = 1;
  mc.bind_api = 2;
  mc.device = 1;
  mc.extent = 512ull << 20;
  job[0].records.push_back(mc);
  job[1].records[1].access_count = 2;
  job[1].records[1].access[1] = {CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READ, 0};
  for (const auto& v : job) {
    coord::ParticipantState p;
    p.pid = v.pid;
    p.start_time = v.start_time;
    p.saved_bytes = v.pid == 100 ? kMiB2 : 0;
    p.gpus = {{0, "GPU-00000000-0000-0000-0000-000000000000"}};
    p.records = v.records;
    s.participants.push_back(p);
  }
  s.phases = {{"save", 12.5, kMiB2}, {"release", 0.5, 0}};
  return s;
}

void ExpectSameRecords(const std::vector<proto::Record>& a, const std::vector<proto::Record>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(coord::RecordToJson(a[i]), coord::RecordToJson(b[i])) << "record " << i;
    // Every field the JSON carries survives byte for byte.
    EXPECT_EQ(a[i].address, b[i].address);
    EXPECT_EQ(a[i].id.creator_start, b[i].id.creator_start);
    EXPECT_EQ(a[i].access_count, b[i].access_count);
  }
}

TEST_F(StateFileTest, RoundTripKeepsEveryField) {
  const auto written = SampleState();
  ASSERT_TRUE(coord::WriteStateFile(dir_, written).ok());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->format_version, coord::kStateFormatVersion);
  EXPECT_EQ(read->driver, "simulated");
  EXPECT_EQ(read->checkpoint_id, "692c9a00-0123456789abcdef");
  EXPECT_EQ(read->created_unix_s, 1764489600);
  ASSERT_EQ(read->participants.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(read->participants[i].pid, written.participants[i].pid);
    EXPECT_EQ(read->participants[i].start_time, written.participants[i].start_time);
    EXPECT_EQ(read->participants[i].saved_bytes, written.participants[i].saved_bytes);
    EXPECT_EQ(read->participants[i].gpus, written.participants[i].gpus);
    ExpectSameRecords(read->participants[i].records, written.participants[i].records);
  }
  EXPECT_EQ(read->participants[0].records[2].member_offset, 4096u);
  EXPECT_EQ(read->participants[0].records[2].extent, 512ull << 20);
  EXPECT_EQ(read->participants[1].records[1].access[1].flags,
            static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READ));
  ASSERT_EQ(read->phases.size(), 2u);
  EXPECT_EQ(PhaseNamed(read->phases, "save").bytes, kMiB2);
  EXPECT_EQ(PhaseNamed(read->phases, "release").elapsed_ms, 0.5);
}

TEST_F(StateFileTest, RecordsAreStoredByNameWithoutHandles) {
  ASSERT_TRUE(coord::WriteStateFile(dir_, SampleState()).ok());
  std::ifstream in(coord::StateFilePath(dir_));
  const auto json = nlohmann::json::parse(in);
  const auto& r = json["participants"][0]["records"][0];
  EXPECT_EQ(r["kind"], "allocation");
  EXPECT_EQ(r["flags"], nlohmann::json({"creator", "handle_live", "shared"}));
  EXPECT_EQ(json["participants"][0]["records"][1]["address"], "0x7f0000000000");
  EXPECT_FALSE(r.contains("fd"));
  EXPECT_FALSE(r.contains("handle"));
}

TEST_F(StateFileTest, AtomicWriteLeavesOnlyTheFinalFile) {
  ASSERT_TRUE(coord::WriteStateFile(dir_, SampleState()).ok());
  auto second = SampleState();
  second.driver = "second";
  ASSERT_TRUE(coord::WriteStateFile(dir_, second).ok());  // replaces the first
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"cusnap-state.json"});
  struct stat st {};
  ASSERT_EQ(::stat(coord::StateFilePath(dir_).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(coord::ReadStateFile(dir_)->driver, "second");
}

TEST_F(StateFileTest, FailedWriteKeepsThePreviousFile) {
  ASSERT_TRUE(coord::WriteStateFile(dir_, SampleState()).ok());
  fs::permissions(dir_, kReadOnlyDir);
  auto second = SampleState();
  second.driver = "second";
  const auto status = AsUnprivileged([&] { return coord::WriteStateFile(dir_, second); });
  fs::permissions(dir_, fs::perms::owner_all);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, EACCES);
  EXPECT_THAT(status.error().message, HasSubstr(dir_));
  EXPECT_EQ(coord::ReadStateFile(dir_)->driver, "simulated");
}

TEST_F(StateFileTest, MissingFileIsNamed) {
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ENOENT);
  EXPECT_EQ(read.error().message, "no checkpoint in " + dir_ + ": " + dir_ +
                                      "/cusnap-state.json does not exist");
}

TEST_F(StateFileTest, NotJsonIsCorrupt) {
  WriteRaw("{\"format\": \"cusnap-state\", truncated");
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, dir_ + "/cusnap-state.json: corrupt state file (not valid JSON)");
}

TEST_F(StateFileTest, ForeignJsonIsRefused) {
  WriteRaw("{\"hello\": 1}");
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, dir_ + "/cusnap-state.json: not a cusnap state file (field "
                                         "'format' is not \"cusnap-state\")");
}

TEST_F(StateFileTest, OtherFormatVersionIsRefused) {
  auto json = coord::StateToJson(SampleState());
  json["format_version"] = 7;
  WriteRaw(json.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, dir_ + "/cusnap-state.json: state file format version 7 is "
                                         "not supported (this cusnap reads version " +
                                         std::to_string(coord::kStateFormatVersion) + ")");
}

// Format 3 carries a digest of the document: a file without one, or one whose content no
// longer matches it, is refused, each named as what it is.
TEST_F(StateFileTest, AMissingOrWrongDigestIsRefused) {
  auto json = coord::StateToJson(SampleState());
  auto no_digest = json;
  no_digest.erase("digest");
  WriteRaw(no_digest.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, dir_ + "/cusnap-state.json: the state file has no digest: it "
                                         "was not written by this cusnap as it is, so it does not "
                                         "describe a checkpoint");
  json["participants"][0]["saved_bytes"] = 12345;
  WriteRaw(json.dump());
  read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("was changed after the checkpoint wrote it (its "
                                              "digest does not match its content)"));
}

TEST_F(StateFileTest, BadRecordIsNamed) {
  auto json = coord::StateToJson(SampleState());
  json["participants"][1]["records"][1]["kind"] = "bogus";
  WriteRaw(json.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().message, dir_ + "/cusnap-state.json: corrupt state file (participant "
                                         "pid 200, record 1): unknown record kind 'bogus'");
}

TEST_F(StateFileTest, MissingFieldIsNamed) {
  auto json = coord::StateToJson(SampleState());
  json["participants"][0].erase("start_time");
  WriteRaw(json.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("corrupt state file (participant pid 100)"));
  EXPECT_THAT(read.error().message, HasSubstr("start_time"));
}

TEST_F(StateFileTest, BadAddressIsNamed) {
  auto json = coord::StateToJson(SampleState());
  json["participants"][0]["records"][1]["address"] = "0xZZ";
  WriteRaw(json.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("field 'address' is not a hex address: '0xZZ'"));
}

TEST_F(StateFileTest, DuplicatePidIsRefused) {
  auto json = coord::StateToJson(SampleState());
  json["participants"][1]["pid"] = 100;
  WriteRaw(json.dump());
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("pid listed twice"));
}

TEST_F(StateFileTest, PrepareCreatesTheDirectory) {
  const std::string nested = dir_ + "/a/b";
  ASSERT_TRUE(coord::PrepareStateDir(nested).ok());
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_TRUE(fs::is_empty(nested));  // the probe file is gone again
}

TEST_F(StateFileTest, PrepareRefusesAnUnwritableDirectory) {
  fs::permissions(dir_, kReadOnlyDir);
  const auto status = AsUnprivileged([&] { return coord::PrepareStateDir(dir_); });
  ASSERT_FALSE(status.ok());
  // As root the attempt runs as nobody on root's directory: refused as not ours before any
  // write is tried; otherwise the directory is ours and the write probe fails.
  const std::string expected =
      ::geteuid() == 0 ? "state directory " + dir_ + " is unsafe: it is owned by uid 0, not by this user"
                       : "cannot create a file in state directory " + dir_ + ": Permission denied";
  EXPECT_EQ(status.error().message.rfind(expected, 0), 0u) << status.error().message;
}

TEST_F(StateFileTest, PrepareRefusesAFileInThePath) {
  WriteRaw("x");
  const auto status = coord::PrepareStateDir(coord::StateFilePath(dir_) + "/sub");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error().message, HasSubstr("cannot create state directory"));
}

}  // namespace
}  // namespace cusnap::testing

namespace cusnap::testing {
namespace {

// Works as root too: nobody can create files in /proc/self.
TEST(StateDirPreflight, RefusesADirectoryNobodyCanWrite) {
  const auto status = coord::PrepareStateDir("/proc/self");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.error().message, StartsWith("cannot create a file in state directory /proc/self: "));
}


// The state file is read without trusting what is at its name.
TEST_F(StateFileTest, ASymlinkIsNeverFollowedOutOfTheStateDirectory) {
  const std::string outside = dir_ + "-outside.json";
  {
    std::ofstream out(outside);
    out << coord::StateToJson(SampleState()).dump();
  }
  ASSERT_EQ(::symlink(outside.c_str(), (dir_ + "/cusnap-state.json").c_str()), 0);
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, ELOOP);
  EXPECT_THAT(read.error().message, HasSubstr("it is a symbolic link (never followed"));
  ::unlink(outside.c_str());
}

TEST_F(StateFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir_ + "/cusnap-state.json").c_str(), 0600), 0);
  auto read = coord::ReadStateFile(dir_);  // a blocking open would never return
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("not a regular file"));
}

TEST_F(StateFileTest, AHardLinkIsRefused) {
  WriteRaw(coord::StateToJson(SampleState()).dump());
  ASSERT_EQ(::link((dir_ + "/cusnap-state.json").c_str(), (dir_ + "/second").c_str()), 0);
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("it has 2 hard links"));
}

TEST_F(StateFileTest, AnOversizedFileIsRefusedUnread) {
  const std::string path = dir_ + "/cusnap-state.json";
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(coord::kMaxStateFileBytes) + 1), 0);  // sparse
  ::close(fd);
  auto read = coord::ReadStateFile(dir_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code, EFBIG);
  EXPECT_THAT(read.error().message, HasSubstr("268435457 bytes, more than a state file may hold"));
}

TEST_F(StateFileTest, NumbersOutOfRangeAreRefusedNotWrapped) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> change;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"pid 2^40", [](nlohmann::json& j) { j["participants"][0]["pid"] = int64_t{1} << 40; },
       "field 'pid' is 1099511627776, outside 1..4194304"},
      {"pid 0", [](nlohmann::json& j) { j["participants"][0]["pid"] = 0; },
       "field 'pid' is 0, outside 1..4194304"},
      {"negative saved bytes", [](nlohmann::json& j) { j["participants"][0]["saved_bytes"] = -1; },
       "field 'saved_bytes' is -1, outside 0..18446744073709551615"},
      {"negative size", [](nlohmann::json& j) { j["participants"][1]["records"][0]["size"] = -4096; },
       "field 'size' is -4096, outside 0..18446744073709551615"},
      {"fractional size", [](nlohmann::json& j) { j["participants"][1]["records"][0]["size"] = 1.5; },
       "field 'size' is not an integer"},
      {"handle count 2^32", [](nlohmann::json& j) {
         j["participants"][1]["records"][0]["handle_count"] = int64_t{1} << 32; },
       "field 'handle_count' is 4294967296, outside 0..4294967295"},
      {"negative elapsed", [](nlohmann::json& j) { j["phases"][0]["elapsed_ms"] = -3.0; },
       "elapsed_ms -3.0 is not a time"},
  };
  for (const Case& c : cases) {
    auto json = coord::StateToJson(SampleState());
    c.change(json);
    WriteRaw(json.dump());
    auto read = coord::ReadStateFile(dir_);
    ASSERT_FALSE(read.ok()) << c.what;
    EXPECT_THAT(read.error().message, HasSubstr(c.message)) << c.what;
  }
}

}  // namespace
}  // namespace cusnap::testing
