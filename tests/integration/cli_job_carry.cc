// What the host carrier carries, through the real `cusnap` binary and job_worker
// processes on the simulated driver: with CUSNAP_CARRY=all (the default) private allocations
// travel through the carrier beside POSIX-capable ones; with CUSNAP_CARRY=shared only the
// POSIX-capable ones do and the private bytes go through the native checkpoint; both come
// back byte for byte. All-zero chunks are not copied: the phase lines say how many bytes
// were skipped, and those bytes come back as zeros. A driver fault at a chunk boundary of
// save or reallocate is named with the chunk's byte range and loses nothing: checkpoint rolls
// back, restore runs again.
#include <gmock/gmock.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

class CliJobCarry : public JobTest {
 protected:
  void TearDown() override {
    JobTest::TearDown();
    ::unsetenv("CUSNAP_CARRY");
    ::unsetenv("CUSNAP_CARRIER_CHUNK_MIB");
    ::unsetenv("SIMCUDA_FAULTS");
  }

  // One worker whose driver fails as `faults` says (SIMCUDA_FAULTS), with a 6 MiB
  // POSIX-capable allocation in 2 MiB carrier chunks, mapped and filled.
  Worker& ChunkedJob(const char* faults) {
    ::setenv("CUSNAP_CARRIER_CHUNK_MIB", "2", 1);
    ::setenv("SIMCUDA_FAULTS", faults, 1);
    Worker& w = Start("creator", 0);
    ::unsetenv("SIMCUDA_FAULTS");
    Create(w, "A", 6, "dev", 0);
    Map(w, "a", "A", 0, 6, "0");
    Fill(w, "a");
    return w;
  }

  // The line of `output` that starts with phase `name` ("" when none).
  static std::string PhaseLine(const std::string& output, const std::string& name) {
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name + " ", 0) == 0) return line;
    }
    return "";
  }

  // One worker with a private 4 MiB allocation and a POSIX-capable 2 MiB one, each mapped
  // and filled; checkpointed: the save phase line carries `saved`; restored: every byte.
  void PrivateAndSharedCycle(const std::string& saved) {
    Worker& w = Start("creator", 0);
    ASSERT_NO_FATAL_FAILURE(Create(w, "P", 4, "dev", 0, /*exportable=*/false));
    ASSERT_NO_FATAL_FAILURE(Map(w, "p", "P", 0, 4, "0"));
    ASSERT_NO_FATAL_FAILURE(Fill(w, "p"));
    ASSERT_NO_FATAL_FAILURE(CreateFilled(w, "S", 2, "dev", 0, "s", "0"));
    CheckEveryByte();
    const std::string state = dir_ + "/state";
    const Ran ck = Checkpoint(state);
    ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
    EXPECT_THAT(PhaseLine(ck.out, "save"), HasSubstr(saved)) << ck.out;
    const Ran rs = Restore(state);
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    EXPECT_THAT(PhaseLine(rs.out, "reallocate"), HasSubstr(saved)) << rs.out;
    CheckEveryByte();
  }
};

TEST_F(CliJobCarry, CarryAllTakesPrivateMemoryThroughTheCarrier) {
  ::unsetenv("CUSNAP_CARRY");  // the default
  ASSERT_NO_FATAL_FAILURE(PrivateAndSharedCycle("6.00 MiB"));
}

TEST_F(CliJobCarry, SharedOnlyLeavesPrivateMemoryToTheNativeCheckpoint) {
  ::setenv("CUSNAP_CARRY", "shared", 1);
  ASSERT_NO_FATAL_FAILURE(PrivateAndSharedCycle("2.00 MiB"));
}

TEST_F(CliJobCarry, CarryAllReleasesEveryByteBeforeTheNativeCheckpoint) {
  Worker& w = Start("creator", 0);
  ASSERT_NO_FATAL_FAILURE(Create(w, "P", 4, "dev", 0, /*exportable=*/false));
  ASSERT_NO_FATAL_FAILURE(Map(w, "p", "P", 0, 4, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(w, "p"));
  // Every check of a full cycle: device memory released, nothing held in the driver while
  // checkpointed, same VAs and handles after, every byte.
  ASSERT_NO_FATAL_FAILURE(Cycle(dir_ + "/state"));
}

TEST_F(CliJobCarry, ZeroChunksAreSkippedAndComeBackZero) {
  ::setenv("CUSNAP_CARRIER_CHUNK_MIB", "2", 1);
  Worker& w = Start("creator", 0);
  ASSERT_NO_FATAL_FAILURE(Create(w, "Z", 4, "dev", 0));
  // Mapped outside the harness's records (it would expect a pattern there): chunk 0 stays
  // zero, chunk 1 gets one non-zero word.
  ASSERT_THAT(Ask(w, "map z Z 0 4 0"), ::testing::StartsWith("ok "));
  constexpr int kWordInChunk1 = 786432;  // byte 3 MiB
  ASSERT_EQ(Ask(w, "write z " + std::to_string(kWordInChunk1) + " 7"), "ok");
  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);
  ASSERT_EQ(ck.status, 0) << ck.out << ck.err;
  EXPECT_THAT(PhaseLine(ck.out, "save"), HasSubstr("4.00 MiB")) << ck.out;
  EXPECT_THAT(PhaseLine(ck.out, "save"), HasSubstr("2.00 MiB zero, skipped")) << ck.out;
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(PhaseLine(rs.out, "reallocate"), HasSubstr("2.00 MiB zero, skipped")) << rs.out;
  EXPECT_EQ(Ask(w, "read z 0"), "ok 0");
  EXPECT_EQ(Ask(w, "read z 524287"), "ok 0");  // the last word of chunk 0
  EXPECT_EQ(Ask(w, "read z " + std::to_string(kWordInChunk1)), "ok 7");
  EXPECT_EQ(Ask(w, "read z 1048575"), "ok 0");  // the last word of chunk 1
  EXPECT_EQ(Ask(w, "unmap z"), "ok");
}

TEST_F(CliJobCarry, SaveFaultAtAChunkBoundaryIsNamedAndTheJobRollsBack) {
  ChunkedJob("cuMemcpyDtoHAsync:2:700");  // the second chunk's copy
  ASSERT_FALSE(HasFatalFailure());
  const std::string state = dir_ + "/state";
  const Ran failed = Checkpoint(state);
  EXPECT_NE(failed.status, 0);
  EXPECT_THAT(failed.out + failed.err,
              HasSubstr("copying bytes [2097152, 4194304) of allocation handle"));
  EXPECT_THAT(failed.out + failed.err, HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  // Rolled back before anything was released: running, every byte where it was.
  EXPECT_EQ(Phases(), std::vector<std::string>{"active"});
  CheckEveryByte();
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
}

TEST_F(CliJobCarry, ReallocateFaultAtAChunkBoundaryIsNamedAndRestoreRunsAgain) {
  ChunkedJob("cuMemcpyHtoDAsync:2:700");  // the second chunk's copy back
  ASSERT_FALSE(HasFatalFailure());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  const Ran failed = Restore(state);
  EXPECT_NE(failed.status, 0);
  EXPECT_THAT(failed.out + failed.err,
              HasSubstr("restoring bytes [2097152, 4194304) of allocation handle"));
  // The carrier kept every byte: restore again finishes the job.
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

}  // namespace
}  // namespace jobtest
