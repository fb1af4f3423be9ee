// The shim's test printers (tests/shim_printers.h).
#include <gtest/gtest.h>

#include <string>

#include "shim_printers.h"

namespace cusnap::shim {
namespace {

using ::testing::PrintToString;

TEST(ShimPrinters, EnumeratorsPrintTheirNameAndNumber) {
  EXPECT_EQ(PrintToString(CarrierMode::kEager), "shim::CarrierMode::kEager (1)");
  EXPECT_EQ(PrintToString(RangeMatch::kCovers),
            "shim::RangeMatch::kCovers (" + std::to_string(static_cast<int>(RangeMatch::kCovers)) + ")");
}

}  // namespace
}  // namespace cusnap::shim
