// The carrier written beside a dump's images and read back (HostCarrier::WriteFile, then
// ReadFile finding the files and Load streaming them to the device; carrier_file.h), over the
// simulated driver: bytes back exact, zero chunks as holes, the arena given back and not
// provided again, every failure named with nothing lost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "carrier_fixture.h"

namespace cusnap::shim {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CarrierOnDiskTest : public HostCarrierTest {
 protected:
  void SetUp() override {
    HostCarrierTest::SetUp();
    allocations_.reserve(8);  // a_ and b_ point into it
    char templ[] = "/tmp/cusnap-carrier-file-XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    fs::remove_all(dir_);
    HostCarrierTest::TearDown();
  }
  // 2 MiB chunks: a 6 MiB allocation has three, the middle one all zero.
  static CarrierOptions Chunked() {
    CarrierOptions options;
    options.chunk_bytes = 2 * kMiB;
    return options;
  }
  // An allocation of 6 MiB whose middle 2 MiB are zero, and one of 2 MiB, both patterned.
  void MakeTwo() {
    a_ = &Create(6 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    b_ = &Create(2 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
    pattern_a_ = Pattern(a_->size, 0xa11ce);
    std::fill(pattern_a_.begin() + (2 * kMiB) / 4, pattern_a_.begin() + (4 * kMiB) / 4, 0u);
    pattern_b_ = Pattern(b_->size, 0xb0b);
    Write(*a_, pattern_a_);
    Write(*b_, pattern_b_);
  }
  // MakeTwo, saved into the arena.
  void SaveTwo(HostCarrier& carrier) {
    MakeTwo();
    const CarrierSlot slots[] = {Slot(*a_), Slot(*b_)};
    Result<CarrierTransfer> saved = carrier.Save(slots);
    ASSERT_TRUE(saved.ok()) << saved.error().message;
    ASSERT_EQ(saved->zero_bytes, 2 * kMiB);
  }
  // What the native checkpoint does to device memory: fresh allocations, scribbled.
  std::vector<CarrierSlot> ReplaceBoth() {
    Replace(*a_);
    Replace(*b_);
    Scribble(*a_);
    Scribble(*b_);
    return {Slot(*a_), Slot(*b_)};
  }
  std::string Stem() const { return dir_ + "/carrier-1"; }
  std::string Part(int k) const { return dir_ + "/carrier-1-" + std::to_string(k) + ".bin"; }

  static void WriteVictim(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("untouched", f);
    std::fclose(f);
  }
  static std::string ReadVictim(const std::string& path) {
    char text[32] = {};
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) return "";
    const size_t n = std::fread(text, 1, sizeof text - 1, f);
    std::fclose(f);
    return std::string(text, n);
  }

  std::string dir_;
  AppAllocation* a_ = nullptr;
  AppAllocation* b_ = nullptr;
  std::vector<uint32_t> pattern_a_, pattern_b_;
};

// Layout: a [0, 6 MiB) with its middle chunk zero, b [6, 8 MiB): 6 MiB of data in three
// 2 MiB units, so three part files of about 2 MiB of data each: [0, 2), [2, 6) (its first
// half a hole) and [6, 8) MiB.
TEST_F(CarrierOnDiskTest, WrittenInPartsGivenBackReadAndLoadedExact) {
  HostCarrier carrier(api, Chunked());
  SaveTwo(carrier);
  ASSERT_TRUE(carrier.registered()) << "kept pinning, the default";
  Result<CarrierTransfer> written = carrier.WriteFile(Stem());
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(written->bytes, 8 * kMiB);
  EXPECT_EQ(written->zero_bytes, 2 * kMiB);  // a hole
  EXPECT_EQ(written->chunks, 3u);            // part files
  EXPECT_EQ(fs::file_size(Part(0)), 2 * kMiB);
  EXPECT_EQ(fs::file_size(Part(1)), 4 * kMiB);
  EXPECT_EQ(fs::file_size(Part(2)), 2 * kMiB);
  for (int k = 0; k < 3; ++k) {
    struct stat st {};
    ASSERT_EQ(::stat(Part(k).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  EXPECT_EQ(carrier.capacity(), 0u) << "the arena went back to the kernel: CRIU dumps none of it";
  EXPECT_FALSE(carrier.registered());
  EXPECT_EQ(carrier.file_name(), "carrier-1-0.bin, carrier-1-1.bin, carrier-1-2.bin");

  const std::vector<CarrierSlot> fresh = ReplaceBoth();
  Result<CarrierTransfer> refused = carrier.Load(fresh);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(refused.error().message,
              HasSubstr("pid " + std::to_string(getpid()) + ": host carrier: the saved bytes are "
                        "in the files carrier-1-0.bin, carrier-1-1.bin, carrier-1-2.bin (written "
                        "for a dump), not in memory: READ_CARRIER brings them back before a "
                        "reallocate"));

  // The images directory was moved: the carrier is told where it is now.
  const std::string moved = dir_ + "/moved";
  fs::create_directory(moved);
  for (int k = 0; k < 3; ++k) fs::rename(Part(k), moved + "/carrier-1-" + std::to_string(k) + ".bin");
  Result<CarrierTransfer> read = carrier.ReadFile(moved);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(read->bytes, 8 * kMiB);
  EXPECT_EQ(read->zero_bytes, 2 * kMiB);
  // Found, not read: Load streams them from there to the device, one pass, no arena.
  EXPECT_EQ(carrier.file_name(), "carrier-1-0.bin, carrier-1-1.bin, carrier-1-2.bin");
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->bytes, 8 * kMiB);
  EXPECT_EQ(loaded->zero_bytes, 2 * kMiB);
  EXPECT_EQ(loaded->chunks, 3u) << "one unit of each part file";
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
  EXPECT_EQ(carrier.capacity(), 0u) << "no arena was provided to read the files into";
  EXPECT_FALSE(carrier.registered()) << "the read buffers were unpinned";

  // The files stay the saved bytes: a reallocate run again loads them again.
  Scribble(*a_);
  Scribble(*b_);
  ASSERT_TRUE(carrier.Load(fresh).ok());
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);

  // A new save puts the bytes in memory again: nothing to read then.
  ASSERT_TRUE(carrier.Save(fresh).ok());
  Result<CarrierTransfer> nothing = carrier.ReadFile(moved);
  ASSERT_TRUE(nothing.ok()) << nothing.error().message;
  EXPECT_EQ(nothing->bytes, 0u);
  EXPECT_EQ(carrier.file_name(), "");
}

// A dump's save streams the bytes from the device straight into the part files (no arena is
// provided); the write after release then only reports them; found again, they load back
// exact. A disk that fills mid-stream fails the save naming ENOSPC, leaves no part file and no
// saved bytes (a load refuses), and the device memory is untouched: the save runs again.
TEST_F(CarrierOnDiskTest, ASaveToFilesStreamsFromTheDeviceWithoutAnArena) {
  HostCarrier carrier(api, Chunked());
  MakeTwo();
  const CarrierSlot slots[] = {Slot(*a_), Slot(*b_)};

  ::setenv(kCarrierIoFaultVariable, "write:enospc:1", 1);
  Result<CarrierTransfer> full = carrier.Save(slots, Stem());
  ::unsetenv(kCarrierIoFaultVariable);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, ENOSPC);
  EXPECT_THAT(full.error().message, HasSubstr("pid " + std::to_string(getpid()) + ": host carrier: writing bytes ["));
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(fs::exists(Part(k)));
  EXPECT_EQ(carrier.saved_bytes(), 0u) << "a failed save holds nothing";
  EXPECT_EQ(Read(*a_), pattern_a_) << "the device memory is as it was";

  Result<CarrierTransfer> saved = carrier.Save(slots, Stem());
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_EQ(saved->bytes, 8 * kMiB);
  EXPECT_EQ(saved->zero_bytes, 2 * kMiB);
  EXPECT_EQ(saved->provision_ns, 0u);
  EXPECT_EQ(carrier.capacity(), 0u) << "no arena: the bytes went from the device to the files";
  EXPECT_FALSE(carrier.registered());
  EXPECT_EQ(fs::file_size(Part(0)), 2 * kMiB);
  EXPECT_EQ(fs::file_size(Part(1)), 4 * kMiB);
  EXPECT_EQ(fs::file_size(Part(2)), 2 * kMiB);
  const std::vector<FilePart> parts = carrier.file_parts();
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].chunks[0].digest, DigestOf(pattern_b_.data(), 2 * kMiB));

  Result<CarrierTransfer> written = carrier.WriteFile(Stem());
  ASSERT_TRUE(written.ok()) << written.error().message;
  EXPECT_EQ(written->bytes, 8 * kMiB);
  EXPECT_EQ(carrier.file_parts().size(), 3u);
  EXPECT_EQ(carrier.file_parts()[2].chunks[0].digest, parts[2].chunks[0].digest);

  const std::vector<CarrierSlot> fresh = ReplaceBoth();
  EXPECT_FALSE(carrier.Load(fresh).ok()) << "not found yet: READ_CARRIER comes first";
  ASSERT_TRUE(carrier.ReadFile(dir_).ok());
  Result<CarrierTransfer> loaded = carrier.Load(fresh);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

// A unit of a part file that spans two allocations (a 6 MiB allocation in 4 MiB chunks: its
// second chunk ends where the next allocation starts, and the file's unit runs on) is copied
// into both; one read buffer (a ring of one unit) carries every unit in turn.
TEST_F(CarrierOnDiskTest, AUnitAcrossTwoAllocationsThroughARingOfOneBufferLoadsBothExact) {
  CarrierOptions options;
  options.chunk_bytes = 4 * kMiB;
  options.ring_bytes = 4 * kMiB;
  HostCarrier carrier(api, options);
  a_ = &Create(6 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  b_ = &Create(4 * kMiB, CU_MEM_LOCATION_TYPE_DEVICE, 0, 0);
  pattern_a_ = Pattern(a_->size, 0x5eed);
  pattern_b_ = Pattern(b_->size, 0xfeed);
  Write(*a_, pattern_a_);
  Write(*b_, pattern_b_);
  const CarrierSlot slots[] = {Slot(*a_), Slot(*b_)};
  ASSERT_TRUE(carrier.Save(slots).ok());
  ASSERT_TRUE(carrier.WriteFile(Stem()).ok());
  bool spans = false;
  for (const FilePart& part : carrier.file_parts()) {
    for (const FileChunk& c : part.chunks) {
      const uint64_t begin = part.begin + c.offset;
      spans = spans || (begin < 6 * kMiB && begin + c.bytes > 6 * kMiB);
    }
  }
  ASSERT_TRUE(spans) << "a unit runs from the first allocation into the second";
  ASSERT_TRUE(carrier.ReadFile(dir_).ok());
  Result<CarrierTransfer> loaded = carrier.Load(ReplaceBoth());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->bytes, 10 * kMiB);
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

TEST_F(CarrierOnDiskTest, AWriteThatFailsRemovesEveryPartAndChangesNothing) {
  HostCarrier carrier(api, Chunked());
  SaveTwo(carrier);
  const std::string nowhere = dir_ + "/no-such-dir/carrier-1";
  Result<CarrierTransfer> failed = carrier.WriteFile(nowhere);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, ENOENT);
  EXPECT_THAT(failed.error().message, HasSubstr("host carrier: cannot create " + nowhere + "-0.bin"));

  // A symbolic link where a part goes is not followed.
  const std::string victim = dir_ + "/victim";
  WriteVictim(victim);
  fs::create_symlink(victim, Part(0));
  Result<CarrierTransfer> linked = carrier.WriteFile(Stem());
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(linked.error().code, ELOOP);
  EXPECT_EQ(ReadVictim(victim), "untouched");
  fs::remove(Part(0));

  // The last part cannot be made: the first two, made already, go too.
  fs::create_directory(Part(2));
  Result<CarrierTransfer> third = carrier.WriteFile(Stem());
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error().code, EISDIR);
  EXPECT_THAT(third.error().message, HasSubstr("cannot create " + Part(2)));
  EXPECT_FALSE(fs::exists(Part(0)));
  EXPECT_FALSE(fs::exists(Part(1)));

  EXPECT_EQ(carrier.file_name(), "");
  EXPECT_TRUE(carrier.registered()) << "the arena and its bytes stay";
  Result<CarrierTransfer> loaded = carrier.Load(ReplaceBoth());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

TEST_F(CarrierOnDiskTest, AMissingOrShortPartIsNamedAndTheReadRunsAgain) {
  HostCarrier carrier(api, Chunked());
  SaveTwo(carrier);
  ASSERT_TRUE(carrier.WriteFile(Stem()).ok());
  const std::string aside = dir_ + "/aside.bin";
  fs::rename(Part(1), aside);
  Result<CarrierTransfer> missing = carrier.ReadFile(dir_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_THAT(missing.error().message, HasSubstr("cannot open " + Part(1)));
  EXPECT_THAT(missing.error().message, HasSubstr("the saved bytes stay in the files"));

  fs::copy_file(aside, Part(1));
  fs::resize_file(Part(1), 3 * kMiB);
  Result<CarrierTransfer> shortened = carrier.ReadFile(dir_);
  ASSERT_FALSE(shortened.ok());
  EXPECT_EQ(shortened.error().code, EINVAL);
  EXPECT_THAT(shortened.error().message,
              HasSubstr(Part(1) + " holds 3145728 bytes, but the carrier wrote 4194304"));

  fs::remove(Part(1));
  fs::rename(aside, Part(1));
  Result<CarrierTransfer> read = carrier.ReadFile("");  // from where they were written
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_TRUE(carrier.Load(ReplaceBoth()).ok());
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

TEST_F(CarrierOnDiskTest, NothingSavedIsNothingToWrite) {
  HostCarrier carrier(api, Chunked());
  Result<CarrierTransfer> refused = carrier.WriteFile(Stem());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, CUDA_ERROR_INVALID_VALUE);
  EXPECT_THAT(refused.error().message, HasSubstr("nothing to write to " + Stem() + " (no save holds bytes)"));
  EXPECT_FALSE(fs::exists(Part(0)));
}

// Each unit is digested as it is written (the reply's chunks) and checked as it is read: a
// byte flipped anywhere in a part file stops the read naming the file and the unit's byte
// range, with the bytes still in the files; mended, the read runs again and every byte
// comes back. Holes are in no chunk (never read back).
TEST_F(CarrierOnDiskTest, EveryChunkIsDigestedAsWrittenAndCheckedAsRead) {
  HostCarrier carrier(api, Chunked());
  SaveTwo(carrier);
  ASSERT_TRUE(carrier.WriteFile(Stem()).ok());
  const std::vector<FilePart> parts = carrier.file_parts();
  const std::vector<CarrierSlot> fresh = ReplaceBoth();
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_EQ(parts[1].chunks.size(), 1u);
  EXPECT_EQ(parts[1].chunks[0].offset, 2 * kMiB) << "its first half is the zero chunk, a hole";
  EXPECT_EQ(parts[1].chunks[0].bytes, 2 * kMiB);
  const std::vector<uint32_t> b_bytes = pattern_b_;
  EXPECT_EQ(parts[2].chunks[0].digest, DigestOf(b_bytes.data(), 2 * kMiB));
  for (const uint64_t at : {uint64_t{0}, kMiB, 2 * kMiB - 1}) {
    FILE* f = std::fopen(Part(2).c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(at), SEEK_SET);
    const int good = std::fgetc(f);
    std::fseek(f, static_cast<long>(at), SEEK_SET);
    std::fputc(good ^ 0x40, f);
    std::fclose(f);
    ASSERT_TRUE(carrier.ReadFile(dir_).ok()) << "found: the bytes are checked as they are read";
    Result<CarrierTransfer> corrupt = carrier.Load(fresh);
    ASSERT_FALSE(corrupt.ok());
    EXPECT_EQ(corrupt.error().code, kCarrierFileUnreadable);
    EXPECT_THAT(corrupt.error().message,
                HasSubstr("reading bytes [0, 2097152) of " + Part(2) + " failed: they do not "
                          "match the digest written with them (the file is corrupt); the saved "
                          "bytes stay in the files"));
    f = std::fopen(Part(2).c_str(), "r+b");
    std::fseek(f, static_cast<long>(at), SEEK_SET);
    std::fputc(good, f);
    std::fclose(f);
  }
  Scribble(*a_);
  Scribble(*b_);
  ASSERT_TRUE(carrier.Load(fresh).ok());
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

// Faults in the streaming path (kCarrierIoFaultVariable): a short write is finished by the
// next call; a disk that fills mid-stream fails the write naming ENOSPC and the file, removes
// every part and keeps the bytes in memory; a read error names the file, keeps the bytes in
// the files, and the read runs again.
TEST_F(CarrierOnDiskTest, StreamingFaultsAreNamedAndLoseNothing) {
  HostCarrier carrier(api, Chunked());
  SaveTwo(carrier);
  ::setenv(kCarrierIoFaultVariable, "write:enospc:1", 1);
  Result<CarrierTransfer> full = carrier.WriteFile(Stem());
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().code, ENOSPC);
  EXPECT_THAT(full.error().message, HasSubstr("writing bytes ["));
  EXPECT_THAT(full.error().message, HasSubstr("failed: No space left on device"));
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(fs::exists(Part(k)));
  EXPECT_EQ(carrier.file_name(), "");
  ::setenv(kCarrierIoFaultVariable, "write:short:0", 1);
  ASSERT_TRUE(carrier.WriteFile(Stem()).ok());
  const std::vector<CarrierSlot> fresh = ReplaceBoth();
  ASSERT_TRUE(carrier.ReadFile(dir_).ok());
  ::setenv(kCarrierIoFaultVariable, "read:eio:2", 1);
  Result<CarrierTransfer> unreadable = carrier.Load(fresh);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_EQ(unreadable.error().code, kCarrierFileUnreadable);
  EXPECT_THAT(unreadable.error().message, HasSubstr("reading bytes ["));
  EXPECT_THAT(unreadable.error().message, HasSubstr("failed: Input/output error; the saved bytes "
                                                    "stay in the files"));
  ::setenv(kCarrierIoFaultVariable, "read:short:1", 1);
  Result<CarrierTransfer> read = carrier.Load(fresh);
  ::unsetenv(kCarrierIoFaultVariable);
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(Read(*a_), pattern_a_);
  EXPECT_EQ(Read(*b_), pattern_b_);
}

}  // namespace
}  // namespace cusnap::shim
