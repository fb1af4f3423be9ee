// The fault matrix's case lines and enumeration (fault_case.h), without a job.
#include "fault_case.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace faults {
namespace {

using ::testing::Contains;

TEST(FaultCase, TextRoundTrips) {
  const Case c{Kind::kDriverError, "restore", "reallocate", "before", "cli", "cuMemCreate", 3};
  EXPECT_EQ(c.Text(), "driver-error restore reallocate before cli cuMemCreate 3");
  const auto back = Case::Parse(c.Text());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->Text(), c.Text());
  const Case signal{Kind::kCliSigint, "checkpoint", "save", "after", "", "", 0};
  EXPECT_EQ(signal.Text(), "cli-sigint checkpoint save after - - 0");
  ASSERT_TRUE(Case::Parse(signal.Text()).has_value());
  EXPECT_EQ(Case::Parse(signal.Text())->process, "");
}

TEST(FaultCase, MalformedLinesAreRefused) {
  EXPECT_FALSE(Case::Parse("").has_value());
  EXPECT_FALSE(Case::Parse("cli-sigstop checkpoint save after - - 0").has_value());
  EXPECT_FALSE(Case::Parse("cli-sigint checkpoint save after - -").has_value());
}

TEST(FaultCase, EnumeratesEveryBoundaryAndEveryCall) {
  CommandPlan plan;
  plan.phases = {"quiesce", "save"};
  plan.calls[{"save", "A"}] = {{"cuMemcpyDtoHAsync", 0}, {"cuStreamSynchronize", 2}};
  plan.calls[{"save", "cli"}] = {{"cuCheckpointProcessGetState", 4}};
  plan.workers = {"A", "B"};
  const auto cases = Enumerate({{"checkpoint", plan}});
  std::vector<std::string> lines;
  for (const auto& c : cases) lines.push_back(c.Text());
  // 2 CLI signals before and after each of the 2 phases; 2 kills at each of the 3 boundaries
  // (before quiesce, after each); the three calls of save.
  EXPECT_EQ(cases.size(), 2u * 2u * 2u + 3u * 2u + 3u);
  EXPECT_THAT(lines, Contains("cli-sigkill checkpoint quiesce before - - 0"));
  EXPECT_THAT(lines, Contains("cli-sigint checkpoint save before - - 0"));
  EXPECT_THAT(lines, Contains("kill-participant checkpoint save after B - 0"));
  EXPECT_THAT(lines, Contains("driver-error checkpoint save before A cuStreamSynchronize 0"));
  // In the CLI the fault is armed by call number: the 5th call is the phase's first.
  EXPECT_THAT(lines, Contains("driver-error checkpoint save before cli cuCheckpointProcessGetState 5"));
}

TEST(FaultCase, NobodyIsKilledWhereTheJobIsOnDiskAndCountedProcessesGetANumber) {
  CommandPlan plan;
  plan.phases = {"check_images", "criu_restore"};
  plan.workers = {"root", "child"};
  plan.without_job = {"check_images:before", "check_images:after"};
  plan.counted = {"cli", "root"};
  plan.calls[{"criu_restore", "root"}] = {{"cuMemCreate", 6}};
  const auto cases = Enumerate({{"restore-images", plan}});
  std::vector<std::string> lines;
  for (const auto& c : cases) lines.push_back(c.Text());
  // 2 CLI signals before and after each of the 2 phases; 2 kills at the one boundary where
  // the job exists (after criu_restore); the one call.
  EXPECT_EQ(cases.size(), 2u * 2u * 2u + 2u + 1u);
  EXPECT_THAT(lines, Contains("kill-participant restore-images criu_restore after child - 0"));
  EXPECT_THAT(lines, ::testing::Not(Contains("kill-participant restore-images check_images "
                                             "after child - 0")));
  EXPECT_THAT(lines, Contains("driver-error restore-images criu_restore before root cuMemCreate 7"));
}

}  // namespace
}  // namespace faults
