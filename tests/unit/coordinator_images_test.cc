// The images manifest's file checksums (coordinator/images/manifest.h): a small file's is its SHA-256;
// a file larger than kChecksumPieceBytes is checksummed piece by piece in manifest format 2
// (SHA-256 over its pieces' digests), whole in format 1; HashImageFiles gives the same
// answers on one thread as on many. DumpIdsTaken names every id of a dump (a participant's pid,
// another process's or a thread's, read from CRIU's core-<tid>.img names) that is held here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <thread>
#include <future>

#include "common/ids.h"
#include "coordinator/images/manifest.h"
#include "coordinator/images/restored_aliases.h"
#include "scratch_dir.h"

namespace {

namespace coord = cusnap::coord;
namespace fs = std::filesystem;

// SHA-256("abc"), FIPS 180-2 appendix B.1.
constexpr const char* kSha256OfAbc =
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

class ImageChecksumTest : public cusnap::testing::ScratchDirTest {
 protected:
  ImageChecksumTest() : ScratchDirTest("images-test") {}

  /// Writes `text` to <dir_>/<name>; returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  /// The raw 32 bytes a lowercase hex digest stands for.
  static std::string Raw(const std::string& hex) {
    std::string raw;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    return raw;
  }
};

TEST_F(ImageChecksumTest, ASmallFilesChecksumIsItsSha256InEitherFormat) {
  const std::string path = Write("core-1.img", "abc");
  EXPECT_EQ(coord::ImageChecksum(path, 3, 1).value(), kSha256OfAbc);
  EXPECT_EQ(coord::ImageChecksum(path, 3, 2).value(), kSha256OfAbc);
}

TEST_F(ImageChecksumTest, ALargeFileIsChecksummedPieceByPieceInFormatTwo) {
  const std::string piece(coord::kChecksumPieceBytes, 'p');
  const std::string whole = Write("pages-1.img", piece + "abc");
  const uint64_t bytes = coord::kChecksumPieceBytes + 3;
  // The pieces' digests, each a file's SHA-256 on its own (files of at most one piece).
  const std::string first = coord::ImageChecksum(Write("piece0", piece), piece.size()).value();
  const std::string joined = Write("joined", Raw(first) + Raw(kSha256OfAbc));
  const std::string expected = coord::ImageChecksum(joined, 64).value();
  EXPECT_EQ(coord::ImageChecksum(whole, bytes, 2).value(), expected);
  // Format 1: the SHA-256 of the whole file, which is something else.
  const std::string plain = coord::ImageChecksum(whole, bytes, 1).value();
  EXPECT_NE(plain, expected);
  EXPECT_EQ(plain.size(), 64u);
}

TEST_F(ImageChecksumTest, HashImageFilesAgreesWithImageChecksumOnOneThreadAndMany) {
  const std::string big = std::string(coord::kChecksumPieceBytes * 2, 'x') + "tail";
  Write("pages-2.img", big);
  Write("core-2.img", "abc");
  Write("criu-dump.log", "not hashed");
  for (int format : {1, 2}) {
    auto one = coord::HashImageFiles(dir_, format, 1);
    auto many = coord::HashImageFiles(dir_, format, 8);
    ASSERT_TRUE(one.ok()) << one.error().message;
    ASSERT_TRUE(many.ok()) << many.error().message;
    EXPECT_EQ(*one, *many);
    ASSERT_EQ(one->size(), 2u);  // sorted by name, the log left out
    EXPECT_EQ((*one)[0].name, "core-2.img");
    EXPECT_EQ((*one)[0].sha256, kSha256OfAbc);
    EXPECT_EQ((*one)[1].name, "pages-2.img");
    EXPECT_EQ((*one)[1].bytes, big.size());
    EXPECT_EQ((*one)[1].sha256,
              coord::ImageChecksum(dir_ + "/pages-2.img", big.size(), format).value());
  }
}

// The manifest lists what the dump wrote, nothing else (a notes file kept beside the images
// is no part of the dump): CRIU's images and stats-dump, the
// carrier files and the state file; not a restore's files, CRIU's logs, temporary files or
// the user's own.
TEST_F(ImageChecksumTest, OnlyTheFilesADumpWritesAreImageFiles) {
  for (const char* name : {"pages-1.img", "core-7.img", "stats-dump", "carrier-7-0.bin",
                           "cusnap-state.json", "notes.txt", "criu-dump.log", "restored.pid",
                           "stats-restore", ".cusnap-state.json.tmp.abc123", "carrier-7.bin",
                           "cusnap-images.json"}) {
    Write(name, "x");
  }
  auto listed = coord::ListImageFiles(dir_);
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  std::vector<std::string> names;
  for (const auto& f : *listed) names.push_back(f.name);
  EXPECT_THAT(names, ::testing::ElementsAre("carrier-7-0.bin", "core-7.img", "cusnap-state.json",
                                            "pages-1.img", "stats-dump"));
  EXPECT_EQ(coord::ImageBytes(dir_), 5u);
}

// A manifest written before that rule may list a file of the user's: the restore checks the
// files the manifest lists, whatever their names, and only those (a file it does not list,
// changed or not, refuses nothing).
TEST_F(ImageChecksumTest, TheFilesAManifestListsAreCheckedWhateverTheirNames) {
  // A thread id above pid_max: none here holds it.
  int pid_max = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  ASSERT_GT(pid_max, 0);
  const std::string core = "core-" + std::to_string(pid_max + 1) + ".img";
  Write("notes.txt", "abc");
  Write(core, "abc");
  Write("unlisted.img", "anything");
  coord::Manifest manifest;
  manifest.driver = "simulated";
  manifest.files = {{core, 3, kSha256OfAbc}, {"notes.txt", 3, kSha256OfAbc}};
  const coord::MachineView machine{"simulated", {}, {}};
  const coord::RunningCheck none = [](int, uint64_t) { return 0; };
  std::vector<coord::UuidPair> pairs;
  EXPECT_THAT(coord::CheckImages(dir_, manifest, machine, {}, none, pairs), ::testing::IsEmpty());
  Write("notes.txt", "abd");
  EXPECT_THAT(coord::CheckImages(dir_, manifest, machine, {}, none, pairs),
              ::testing::ElementsAre(::testing::StartsWith("image file " + dir_ + "/notes.txt is "
                                                           "corrupt: its SHA-256 is ")));
  fs::remove(dir_ + "/notes.txt");
  EXPECT_THAT(coord::CheckImages(dir_, manifest, machine, {}, none, pairs),
              ::testing::ElementsAre("image file " + dir_ + "/notes.txt is missing"));
}

TEST_F(ImageChecksumTest, AMissingFileIsNamed) {
  auto sum = coord::ImageChecksum(dir_ + "/gone.img", 10);
  ASSERT_FALSE(sum.ok());
  EXPECT_THAT(sum.error().message, ::testing::HasSubstr(dir_ + "/gone.img"));
}

/// A thread of this process (not its main one) that lives until `done` is set; its id.
class LiveThread {
 public:
  LiveThread() : thread_([this] { id_.set_value(static_cast<int>(::syscall(SYS_gettid))); done_.get_future().wait(); }) {}
  ~LiveThread() { done_.set_value(); thread_.join(); }
  int id() { return id_future_.get(); }
 private:
  std::promise<int> id_;
  std::future<int> id_future_ = id_.get_future();
  std::promise<void> done_;
  std::thread thread_;
};

TEST_F(ImageChecksumTest, DumpIdsTakenNamesParticipantsHeldByOthersAndEveryOtherIdHeldHere) {
  LiveThread thread;
  const int me = static_cast<int>(::getpid());
  const int tid = thread.id();
  // pid_max + 1 is never a live id.
  int pid_max = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  ASSERT_GT(pid_max, 0);
  const int free_id = pid_max + 1;
  for (const int id : {me, tid, free_id}) Write("core-" + std::to_string(id) + ".img", "x");
  Write("core-abc.img", "x");
  Write("core-.img", "x");
  Write("pstree.img", "x");
  coord::Manifest manifest;
  manifest.participants.resize(1);
  manifest.participants[0].pid = me;
  manifest.participants[0].start_time = 42;

  EXPECT_THAT(coord::DumpedIds(dir_, manifest), ::testing::UnorderedElementsAre(me, tid, free_id));
  // The participant is itself (alive with its start time): only the thread is held.
  const auto itself = coord::DumpIdsTaken(dir_, manifest, [](int, uint64_t) { return true; });
  ASSERT_EQ(itself.size(), 1u);
  EXPECT_EQ(itself[0].id, tid);
  EXPECT_FALSE(itself[0].participant);
  // Another process holds the participant's pid: both are held.
  const auto other = coord::DumpIdsTaken(dir_, manifest, [](int, uint64_t) { return false; });
  ASSERT_EQ(other.size(), 2u);
  EXPECT_EQ(other[0].id, me);
  EXPECT_TRUE(other[0].participant);
  EXPECT_EQ(other[1].id, tid);
}

// The restore's start-time aliases (<control dir>/restored/<pid>) whose process is gone are
// stale: no process started at either new start time the alias records. The pid does not
// decide (in a PID namespace of the job's own it means another process here).
TEST_F(ImageChecksumTest, StaleRestoredAliasesAreThoseOfEndedProcesses) {
  ASSERT_EQ(::mkdir((dir_ + "/restored").c_str(), 0700), 0);
  const uint64_t my_start = cusnap::KernelStartTime(::getpid());
  ASSERT_NE(my_start, 0u);
  // This process under another pid (its namespace's), seen from outside and from inside.
  Write("restored/27", std::to_string(my_start) + " 1 42\n");
  Write("restored/28", "1 " + std::to_string(my_start) + " 42\n");
  // Start times no process has: later than now.
  const uint64_t later = my_start + 1'000'000'000ull;
  Write("restored/29", std::to_string(later) + " " + std::to_string(later + 1) + " 42\n");
  Write("restored/30", "not an alias\n");
  EXPECT_THAT(coord::StaleRestoredAliases(dir_),
              ::testing::ElementsAre(dir_ + "/restored/29"));
}

}  // namespace
