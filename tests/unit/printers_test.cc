// The test printers (tests/printers.h, coordinator_printers.h): a failed check on a cusnap
// enum names the value, with its number, instead of dumping its bytes. The shim's printers:
// printers_shim_test.cc (the shim's headers compile cuda.h in another mode).
#include <gtest/gtest.h>

#include "coordinator_printers.h"

namespace cusnap {
namespace {

using ::testing::PrintToString;

TEST(Printers, EnumeratorsPrintTheirNameAndNumber) {
  EXPECT_EQ(PrintToString(proto::ShimState::kFailed), "proto::ShimState::kFailed (11)");
  EXPECT_EQ(PrintToString(proto::Op::kMulticastBind), "proto::Op::kMulticastBind (13)");
  EXPECT_EQ(PrintToString(proto::RecordKind::kUntrackedImport),
            "proto::RecordKind::kUntrackedImport (7)");
  EXPECT_EQ(PrintToString(TicketKind::kMulticast), "TicketKind::kMulticast (2)");
  EXPECT_EQ(PrintToString(LogLevel::kError), "LogLevel::kError (0)");
  EXPECT_EQ(PrintToString(coord::Outcome::kRestoreRefused), "coord::Outcome::kRestoreRefused (3)");
  EXPECT_EQ(PrintToString(coord::DriverChoice::kSimulated), "coord::DriverChoice::kSimulated (2)");
}

TEST(Printers, ValuesWithoutAnEnumeratorPrintTheTypeAndNumber) {
  EXPECT_EQ(PrintToString(static_cast<proto::ShimState>(0)), "proto::ShimState(0)");  // in the table
  EXPECT_EQ(PrintToString(static_cast<proto::ShimState>(4000)), "proto::ShimState(4000)");  // past it
}

}  // namespace
}  // namespace cusnap
