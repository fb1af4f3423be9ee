// Durations from the wire (common/durations.h): a lifecycle request's lease and drain are in
// their ranges or refused naming the field (settings from the environment:
// common_settings_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/durations.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

TEST(CommonDurations, AStepRequestsLeaseAndDrainAreCheckedAgainstTheirRanges) {
  proto::StepRequest request{proto::Op::kQuiesce, 0, ""};
  for (uint64_t ms : {uint64_t{0}, uint64_t{1}, kMaxLeaseMs}) {
    request.lease_ms = ms;
    EXPECT_EQ(StepDurationsProblem(request), "") << ms;
  }
  for (uint64_t ms : {kMaxLeaseMs + 1, uint64_t{10'000'000'000'000}, UINT64_MAX}) {
    request.lease_ms = ms;
    EXPECT_EQ(StepDurationsProblem(request),
              "lease_ms " + std::to_string(ms) + " ms is outside the range 0 (no lease) to 3600000 ms");
  }
  request.lease_ms = 0;
  for (uint64_t ms : {uint64_t{0}, uint64_t{1}, kMaxDrainMs}) {
    request.drain_ms = ms;
    EXPECT_EQ(StepDurationsProblem(request), "") << ms;
  }
  for (uint64_t ms : {kMaxDrainMs + 1, uint64_t{10'000'000'000'000}, UINT64_MAX}) {
    request.drain_ms = ms;
    EXPECT_THAT(StepDurationsProblem(request),
                HasSubstr("drain_ms " + std::to_string(ms) + " ms is outside the range 0"));
  }
}

}  // namespace
}  // namespace cusnap
