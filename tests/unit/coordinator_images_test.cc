// The images manifest's file digests (coordinator/images/manifest.h): every file but a
// carrier in chunks of kImageChunkBytes, each its XXH3-128, the same on one thread as on
// many; a carrier's chunks as its shim reported them; CheckImageFiles names the file and the
// first failing chunk of a flipped byte, a truncated, missing or extra file and bytes where
// the dump left zeros; a manifest of another format is refused naming it. DumpIdsTaken names
// every id of a dump (a participant's pid, another process's or a thread's, read from CRIU's
// core-<tid>.img names) that is held here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
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

#include "common/chunk_digest.h"
#include "common/ids.h"
#include "coordinator/images/manifest.h"
#include "coordinator/images/restored_aliases.h"
#include "scratch_dir.h"

namespace {

namespace coord = cusnap::coord;
namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// XXH3-128("abc"), as xxHash 0.8's xxh128sum prints it.
constexpr const char* kXxh128OfAbc = "06b05ab6733a618578af5f94892f3950";

class ImageChecksumTest : public cusnap::testing::ScratchDirTest {
 protected:
  ImageChecksumTest() : ScratchDirTest("images-test") {}

  /// Writes `text` to <dir_>/<name>; returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  /// The manifest of the dump files in dir_ (DescribeImageFiles), `carriers` as their shims
  /// reported them.
  coord::Manifest Describe(const std::vector<coord::ImageFile>& carriers = {}) {
    coord::Manifest m;
    auto files = coord::DescribeImageFiles(dir_, carriers);
    EXPECT_TRUE(files.ok()) << files.error().message;
    if (files.ok()) m.files = *files;
    return m;
  }
};

TEST_F(ImageChecksumTest, TheChunkDigestIsXxh3Of128BitsInTheHexXxh128sumPrints) {
  const cusnap::ChunkDigest abc = cusnap::DigestOf("abc", 3);
  EXPECT_EQ(cusnap::DigestHex(abc), kXxh128OfAbc);
  cusnap::ChunkDigest parsed;
  ASSERT_TRUE(cusnap::ParseDigestHex(kXxh128OfAbc, parsed));
  EXPECT_EQ(parsed, abc);
  EXPECT_FALSE(cusnap::ParseDigestHex("06B05AB6733A618578AF5F94892F3950", parsed));
  EXPECT_FALSE(cusnap::ParseDigestHex("06b05ab6", parsed));
  cusnap::ChunkHasher pieces;  // piece by piece: the same digest
  pieces.Update("a", 1);
  pieces.Update("bc", 2);
  EXPECT_EQ(pieces.Finish(), abc);
}

TEST_F(ImageChecksumTest, AFileIsDigestedInChunksTheSameOnOneThreadAndMany) {
  const std::string big = std::string(coord::kImageChunkBytes * 2, 'x') + "tail";
  Write("pages-2.img", big);
  Write("core-2.img", "abc");
  Write("empty.img", "");
  Write("criu-dump.log", "not digested");
  auto one = coord::DescribeImageFiles(dir_, {}, 1);
  auto many = coord::DescribeImageFiles(dir_, {}, 8);
  ASSERT_TRUE(one.ok()) << one.error().message;
  ASSERT_TRUE(many.ok()) << many.error().message;
  EXPECT_EQ(*one, *many);
  ASSERT_EQ(one->size(), 3u);  // sorted by name, the log left out
  EXPECT_EQ((*one)[0].name, "core-2.img");
  ASSERT_EQ((*one)[0].chunks.size(), 1u);
  EXPECT_EQ(cusnap::DigestHex((*one)[0].chunks[0].digest), kXxh128OfAbc);
  EXPECT_THAT((*one)[1].chunks, IsEmpty());  // empty.img
  const coord::ImageFile& pages = (*one)[2];
  ASSERT_EQ(pages.chunks.size(), 3u);
  EXPECT_EQ(pages.chunks[2].offset, 2 * coord::kImageChunkBytes);
  EXPECT_EQ(pages.chunks[2].bytes, 4u);
  EXPECT_EQ(pages.chunks[2].digest, cusnap::DigestOf("tail", 4));
  EXPECT_EQ(pages.chunks[1].digest, cusnap::DigestOf(big.data(), coord::kImageChunkBytes));
}

// A carrier file's chunks are its shim's (digested as it wrote them): taken as they are, its
// holes in no chunk. A carrier file no shim reported cannot be vouched for.
TEST_F(ImageChecksumTest, ACarriersChunksAreItsShimsAndAnUnreportedCarrierIsRefused) {
  Write("carrier-7-0.bin", std::string(8192, '\0') + "data");
  const coord::ImageFile written{"carrier-7-0.bin", 8196, {{8192, 4, cusnap::DigestOf("data", 4)}}};
  const coord::Manifest m = Describe({written});
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0], written);
  auto unreported = coord::DescribeImageFiles(dir_, {});
  ASSERT_FALSE(unreported.ok());
  EXPECT_THAT(unreported.error().message, HasSubstr("carrier file " + dir_ + "/carrier-7-0.bin "
                                                    "is not one this dump's shims wrote"));
}

// What the manifest lists, checked: a flipped byte names the file and its first failing
// chunk; a truncated, missing or extra file is named; a carrier's bytes no chunk covers must
// still be zeros (its chunks are checked as its shim reads them back, not here).
TEST_F(ImageChecksumTest, CheckImageFilesNamesEachFileAndItsFirstFailingChunk) {
  const std::string big = std::string(coord::kImageChunkBytes + 10, 'p');
  Write("pages-1.img", big);
  Write("core-1.img", "abc");
  Write("carrier-7-0.bin", std::string(8192, '\0') + "data");
  const coord::Manifest m =
      Describe({{"carrier-7-0.bin", 8196, {{8192, 4, cusnap::DigestOf("data", 4)}}}});
  EXPECT_THAT(coord::CheckImageFiles(dir_, m), IsEmpty());
  Write("pages-1.img", big.substr(0, coord::kImageChunkBytes + 9) + "X");
  EXPECT_THAT(coord::CheckImageFiles(dir_, m),
              ElementsAre("image file " + dir_ + "/pages-1.img is corrupt: its bytes [67108864, "
                          "67108874) do not match their digest in the manifest (the first failing "
                          "chunk is at offset 67108864)"));
  Write("pages-1.img", big);
  Write("carrier-7-0.bin", std::string(100, '\0') + "Z" + std::string(8091, '\0') + "data");
  EXPECT_THAT(coord::CheckImageFiles(dir_, m),
              ElementsAre("image file " + dir_ + "/carrier-7-0.bin is corrupt: byte 100 is not "
                          "zero, where the dump left zeros (a hole)"));
  Write("carrier-7-0.bin", std::string(8192, '\0') + "datX");  // checked by its shim
  EXPECT_THAT(coord::CheckImageFiles(dir_, m), IsEmpty());
  Write("core-1.img", "ab");
  Write("core-9.img", "extra");
  EXPECT_THAT(coord::CheckImageFiles(dir_, m),
              ElementsAre("image file " + dir_ + "/core-1.img holds 2 bytes, the manifest says 3 "
                          "(truncated)",
                          "image file " + dir_ + "/core-9.img is not one the manifest lists (a "
                          "file of another dump, or one added since): remove it, or restore from "
                          "an unchanged copy of the images"));
  fs::remove(dir_ + "/core-1.img");
  fs::remove(dir_ + "/core-9.img");
  EXPECT_THAT(coord::CheckImageFiles(dir_, m),
              ElementsAre("image file " + dir_ + "/core-1.img is missing"));
}

// The check before CRIU leaves the page images' bytes to the check beside it, which reads
// them alone; both name a page image of another size alike (a refusal names it once), and
// the check beside CRIU reads no file of the wrong size.
TEST_F(ImageChecksumTest, ThePageImagesAreCheckedApartFromTheRest) {
  const std::string pages(coord::kImageChunkBytes + 10, 'p');
  Write("pages-1.img", pages);
  Write("core-1.img", "abc");
  const coord::Manifest m = Describe();
  Write("pages-1.img", "X" + pages.substr(1));
  EXPECT_THAT(coord::CheckImageFiles(dir_, m, 0, coord::ReadScope::kBeforeCriu), IsEmpty());
  EXPECT_THAT(coord::CheckImageFiles(dir_, m, 0, coord::ReadScope::kCriuPages),
              ElementsAre(HasSubstr("image file " + dir_ + "/pages-1.img is corrupt: its bytes "
                                    "[0, 67108864)")));
  Write("core-1.img", "abX");
  EXPECT_THAT(coord::CheckImageFiles(dir_, m, 0, coord::ReadScope::kCriuPages),
              ElementsAre(HasSubstr("/pages-1.img is corrupt")));
  Write("pages-1.img", pages.substr(1));
  const std::string cut = "image file " + dir_ + "/pages-1.img holds 67108873 bytes, the "
                          "manifest says 67108874 (truncated)";
  EXPECT_THAT(coord::CheckImageFiles(dir_, m, 0, coord::ReadScope::kBeforeCriu),
              ElementsAre(cut, HasSubstr("/core-1.img is corrupt")));
  EXPECT_THAT(coord::CheckImageFiles(dir_, m, 0, coord::ReadScope::kCriuPages), ElementsAre(cut));
}

// A restore's control directory must be the job's (or hold the job's own below it, a `cusnap
// run --pid-namespace` job's), compared as normalized paths.
TEST(ImagesControlDir, ARestoreRunsInTheJobsControlDirectoryOrTheOneAboveItsOwn) {
  coord::Manifest m;
  EXPECT_EQ(coord::OtherControlDirProblem(m, "/run/x"), "");  // recorded by no older manifest
  m.control_dir = "/run/cusnap";
  EXPECT_EQ(coord::OtherControlDirProblem(m, "/run/cusnap/"), "");
  EXPECT_EQ(coord::OtherControlDirProblem(m, "/run/./cusnap"), "");
  EXPECT_EQ(coord::OtherControlDirProblem(m, "/tmp/other"),
            "the job's endpoints and hold markers are in control directory /run/cusnap (its "
            "CUSNAP_CONTROL_DIR when it was dumped), this restore's is /tmp/other: run the "
            "restore with CUSNAP_CONTROL_DIR=/run/cusnap");
  m.control_dir = "/run/cusnap/pidns-AbC123";
  EXPECT_EQ(coord::OtherControlDirProblem(m, "/run/cusnap"), "");
  EXPECT_NE(coord::OtherControlDirProblem(m, "/run/elsewhere"), "");
}

// Images of another manifest format (SHA-256 per file, before chunk digests) are refused,
// naming their version, what wrote them and what to do.
TEST_F(ImageChecksumTest, AManifestOfAnotherFormatIsRefusedNamingItsVersion) {
  coord::Manifest m = Describe();
  nlohmann::json doc = coord::ManifestToJson(m);
  doc["format_version"] = 2;
  doc["cusnap_version"] = "cusnap 0.1.0 (abc123)";
  auto old = coord::ManifestFromJson(doc, "M");
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.error().message, "M: images of manifest format version 2 (written by cusnap 0.1.0 "
                                 "(abc123)); this cusnap reads format 3 only: restore them with "
                                 "the cusnap that wrote them, or dump the job again with this one");
  doc["format_version"] = 4;
  EXPECT_THAT(coord::ManifestFromJson(doc, "M").error().message,
              HasSubstr("restore them with a cusnap that reads them (a newer one)"));
  doc = coord::ManifestToJson(m);
  auto same = coord::ManifestFromJson(doc, "M");
  ASSERT_TRUE(same.ok()) << same.error().message;
  EXPECT_EQ(same->files, m.files);
  EXPECT_EQ(same->chunk_bytes, coord::kImageChunkBytes);
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
