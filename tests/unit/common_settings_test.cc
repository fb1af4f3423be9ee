// The settings table (common/settings.h): what each setting takes and refuses, the
// defaults the code uses, and the README's settings table, which must say the same row for
// row (its name, what it takes, its default and its readers exactly, its meaning starting
// with the table's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/settings.h"
#include "coordinator/participants/lease.h"

namespace cusnap::settings {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CommonSettings, ALeaseIsTakenFromItsMinimumToItsMaximumAndNothingElse) {
  for (const char* text : {"1", "400", "3600000"}) {
    EXPECT_EQ(NumberOf(kLeaseMs, text), std::stoull(text)) << text;
  }
  for (const char* text : {"0", "3600001", "10000000000000", "18446744073709551615",
                           "99999999999999999999999", "abc", "-1", "+5", " 5", "5 ", "5ms",
                           "1.5", "0x10", ""}) {
    EXPECT_FALSE(Accepts(kLeaseMs, text)) << text;
    EXPECT_EQ(Refusal(kLeaseMs, text), "CUSNAP_LEASE_MS='" + std::string(text) +
                                           "' is not a whole number of ms from 1 to 3600000");
  }
  EXPECT_EQ(FallbackText(kLeaseMs), std::to_string(coord::kDefaultLeaseMs));
}

TEST(CommonSettings, ChoicesAndNumbersWithWordsNameWhatTheyTake) {
  EXPECT_EQ(Refusal(kLog, "bogus"), "CUSNAP_LOG='bogus' is not one of error, warn, info, debug");
  EXPECT_EQ(WordIndex(kLog, "debug"), 3u);
  EXPECT_EQ(Refusal(kCarrierKeep, "lots"),
            "CUSNAP_CARRIER_KEEP='lots' is not all, none or a whole number of MiB from 1 to "
            "1073741824");
  EXPECT_TRUE(Accepts(kCarrierKeep, "none"));
  EXPECT_TRUE(Accepts(kCarrierKeep, "1024"));
  EXPECT_FALSE(NumberOf(kCarrierKeep, "none"));
  EXPECT_EQ(Refusal(kCarrierChunkMib, "3"),
            "CUSNAP_CARRIER_CHUNK_MIB='3' is not an even whole number of MiB from 2 to 65536");
  EXPECT_TRUE(Accepts(kCarrierChunkMib, "2"));
  EXPECT_EQ(Refusal(kCarrierThreads, "0"),
            "CUSNAP_CARRIER_THREADS='0' is not a whole number of threads from 1 to 64");
  EXPECT_EQ(DefaultUsed(kCarrierThreads, "0"),
            "CUSNAP_CARRIER_THREADS='0' is not a whole number of threads from 1 to 64; using "
            "the default, 16, at most the CPUs the process may run on");
  EXPECT_TRUE(Accepts(kControlDir, "anything at all"));
}

TEST(CommonSettings, EveryBadValueIsRefusedAndEveryDefaultIsTaken) {
  for (const Setting* setting : kAll) {
    SCOPED_TRACE(setting->name);
    for (const std::string& bad : BadValues(*setting)) {
      EXPECT_FALSE(Accepts(*setting, bad)) << bad;
      EXPECT_THAT(Refusal(*setting, bad),
                  StartsWith(std::string(setting->name) + "='" + bad + "'"));
    }
    const std::string fallback = setting->fallback;
    if ((setting->kind == Kind::kChoice || setting->kind == Kind::kNumber) &&
        fallback.front() == '`') {
      // The quoted value: "`16`, at most the CPUs ..." names 16.
      EXPECT_TRUE(Accepts(*setting, fallback.substr(1, fallback.find('`', 1) - 1))) << fallback;
    }
    EXPECT_NE(setting->readers, 0u);
  }
}

TEST(CommonSettings, EnvironmentProblemsNameOnlyTheReadersSettings) {
  ::setenv("CUSNAP_CARRIER", "bogus", 1);
  ::setenv("CUSNAP_HOLD", "pause", 1);
  EXPECT_EQ(EnvironmentProblems(kShim),
            std::vector<std::string>{"CUSNAP_CARRIER='bogus' is not one of lazy, eager"});
  EXPECT_EQ(EnvironmentProblems(kCheckpoint),
            std::vector<std::string>{"CUSNAP_HOLD='pause' is not one of stop, run"});
  EXPECT_TRUE(EnvironmentProblems(kInspect).empty());
  ::unsetenv("CUSNAP_CARRIER");
  ::unsetenv("CUSNAP_HOLD");
}

/// The rows of README.md's settings table (the one headed by `header`), in order.
std::vector<std::string> ReadmeSettingsRows(const std::string& header) {
  std::ifstream in(CUSNAP_README_PATH);
  std::vector<std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == header) {
      inside = true;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("|---", 0) == 0) continue;
    if (line.empty() || line[0] != '|') break;
    rows.push_back(line);
  }
  return rows;
}

TEST(CommonSettings, TheReadmesTableSaysWhatTheTableSays) {
  const std::vector<std::string> rows =
      ReadmeSettingsRows("| Variable | Takes | Default | Read by | Meaning |");
  ASSERT_EQ(rows.size(), std::size(kAll))
      << "README.md's settings table must have one row per setting of src/common/settings.h";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Setting& setting = *kAll[i];
    EXPECT_THAT(rows[i], StartsWith(ReadmeRowStart(setting) + setting.meaning))
        << "README.md's row " << i + 1 << " of the settings table; the table says:\n"
        << ReadmeRowStart(setting) << setting.meaning << " ...";
  }
}

}  // namespace
}  // namespace cusnap::settings
