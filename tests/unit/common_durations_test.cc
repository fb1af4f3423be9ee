// Durations from outside (common/durations.h): a setting's text is a whole number of ms in
// its range or refused naming the setting, the value and the range; a lifecycle request's
// lease and drain are in theirs or refused naming the field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/durations.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

TEST(CommonDurations, ASettingIsAcceptedFromItsMinimumToItsMaximum) {
  for (const char* text : {"1", "400", "3600000"}) {
    Result<uint64_t> ms = ParseDurationMs("CUSNAP_LEASE_MS", text, 1, kMaxLeaseMs);
    ASSERT_TRUE(ms.ok()) << text << ": " << ms.error().message;
    EXPECT_EQ(*ms, std::stoull(text));
  }
}

TEST(CommonDurations, ASettingPastItsRangeOrNotANumberIsRefusedNamingTheRange) {
  for (const char* text : {"0", "3600001", "10000000000000", "18446744073709551615",
                           "99999999999999999999999", "abc", "-1", "+5", " 5", "5 ", "5ms",
                           "1.5", "0x10"}) {
    Result<uint64_t> ms = ParseDurationMs("CUSNAP_LEASE_MS", text, 1, kMaxLeaseMs);
    ASSERT_FALSE(ms.ok()) << text;
    EXPECT_THAT(ms.error().message, HasSubstr("CUSNAP_LEASE_MS='" + std::string(text) + "'"));
    EXPECT_THAT(ms.error().message, HasSubstr("1 to 3600000 ms"));
  }
}

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
