// `cusnap demo` as a user runs it, on the simulated driver: the built binary, its exit
// status, its PASS lines and its --json document (sizes, memory readings, phases, checks).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
namespace {

namespace fs = std::filesystem;
using cusnap::testing::Env;
using cusnap::testing::Ran;
using cusnap::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class CliDemoTest : public cusnap::testing::ScratchDirTest {
 protected:
  CliDemoTest() : ScratchDirTest("demo-test") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (HasFatalFailure()) return;
    // The demo makes its own control directory and simulated machine; its temporary
    // directory goes under ours, so the test can see that it was removed.
    ::setenv("TMPDIR", dir_.c_str(), 1);
    ::unsetenv("CUSNAP_CONTROL_DIR");
    ::unsetenv("SIMCUDA_DIR");
    ::unsetenv("LD_PRELOAD");
    ::setenv("CUSNAP_DRIVER", "sim", 1);
  }

  Ran Demo(const std::string& args) {
    return RunCommand(Env("CUSNAP_TEST_BIN_DIR") + "/cusnap demo " + args, dir_);
  }

  /// Entries the demo left in TMPDIR besides the captured stderr (none: it cleans up).
  size_t Leftovers() const {
    size_t n = 0;
    for (const auto& entry : fs::directory_iterator(dir_)) n += entry.path().filename() != "stderr";
    return n;
  }
};

// The default sizes on the simulated driver (2 MiB, 64 MiB, 256 MiB): the product as shipped.
TEST_F(CliDemoTest, DefaultRunPassesEveryCheck) {
  const Ran r = Demo("");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, StartsWith("cusnap demo: simulated driver (no usable GPU here); creator on "
                                "device 0, importer on device 1\n"));
  EXPECT_THAT(r.out, HasSubstr("three shared allocations on device 0: 2.00 MiB, 64.00 MiB, "
                               "256.00 MiB (322.00 MiB)\n"));
  EXPECT_THAT(r.out, HasSubstr("PASS start: creator pid "));
  EXPECT_THAT(r.out, HasSubstr("PASS checkpoint: 11 phases"));
  EXPECT_THAT(r.out, HasSubstr("PASS restore: 13 phases"));
  // Nothing else uses the demo's private simulated machine: exactly the shared bytes leave.
  EXPECT_THAT(r.out, HasSubstr("PASS memory released: device 0: 322.00 MiB used before, 0 B "
                               "after checkpoint, 322.00 MiB after restore\n"));
  EXPECT_THAT(r.out, HasSubstr("PASS every byte: creator 322.00 MiB, importer 322.00 MiB checked "
                               "after restore\n"));
  EXPECT_THAT(r.out, HasSubstr("PASS sharing importer -> creator: allocation 2 word 33554431: wrote 0x"));
  EXPECT_THAT(r.out, HasSubstr("PASS sharing creator -> importer: allocation 0 word 262143: wrote 0x"));
  EXPECT_THAT(r.out, HasSubstr("PASS clean exit: both workers released their memory and exited 0\n"));
  // Phase lines as `cusnap checkpoint` prints them: the creator's bytes through the carrier.
  EXPECT_THAT(r.out, HasSubstr("\nsave "));
  EXPECT_THAT(r.out, HasSubstr("2 participants  322.00 MiB  "));
  EXPECT_THAT(r.out, HasSubstr("\nreallocate "));
  EXPECT_THAT(r.out, HasSubstr("\nPASS: 8/8 checks (simulated driver)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL")));
  EXPECT_EQ(Leftovers(), 0u);
}

TEST_F(CliDemoTest, JsonSummaryWithOtherSizes) {
  const Ran r = Demo("--sizes 4M,2M,6MiB --json");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["command"], "demo");
  EXPECT_EQ(doc["result"], "PASS");
  EXPECT_EQ(doc["exit_code"], 0);
  EXPECT_EQ(doc["driver"], "simulated");
  EXPECT_EQ(doc["simulated"], true);
  EXPECT_EQ(doc["devices"]["creator"], 0);
  EXPECT_EQ(doc["devices"]["importer"], 1);
  EXPECT_GT(doc["pids"]["creator"].get<int>(), 0);
  EXPECT_GT(doc["pids"]["importer"].get<int>(), 0);
  EXPECT_EQ(doc["sizes"], nlohmann::json::array({4u << 20, 2u << 20, 6u << 20}));
  EXPECT_EQ(doc["total_bytes"], 12u << 20);
  ASSERT_EQ(doc["memory"].size(), 2u);
  const auto& device0 = doc["memory"][0];
  EXPECT_EQ(device0["device"], 0);
  EXPECT_EQ(device0["before"], 12u << 20);
  EXPECT_EQ(device0["after_checkpoint"], 0u);
  EXPECT_EQ(device0["after_restore"], 12u << 20);
  EXPECT_EQ(doc["memory"][1]["before"], 0u);  // the importer's device holds no allocation
  EXPECT_EQ(doc["checkpoint"]["outcome"], "ok");
  EXPECT_EQ(doc["restore"]["outcome"], "ok");
  uint64_t saved = 0;
  for (const auto& p : doc["checkpoint"]["phases"]) {
    if (p["name"] == "save") saved = p["bytes"];
  }
  EXPECT_EQ(saved, 12u << 20);
  EXPECT_EQ(doc["restore"]["phases"].back()["name"], "activate");
  ASSERT_EQ(doc["checks"].size(), 8u);
  for (const auto& c : doc["checks"]) EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
  EXPECT_EQ(doc["checks"][0]["name"], "start");
  EXPECT_EQ(doc["checks"][7]["name"], "clean exit");
  EXPECT_EQ(Leftovers(), 0u);
}

TEST_F(CliDemoTest, BadSizesAreAUsageError) {
  const Ran three = Demo("--sizes 2M,3M,4M");
  EXPECT_EQ(three.status, 2);
  EXPECT_THAT(three.err, HasSubstr("--sizes: 3M is not a multiple of the 2 MiB allocation granularity"));
  const Ran two = Demo("--sizes 2M,4M");
  EXPECT_EQ(two.status, 2);
  EXPECT_THAT(two.err, HasSubstr("--sizes: give exactly three sizes"));
  const Ran word = Demo("--sizes 2M,lots,4M");
  EXPECT_EQ(word.status, 2);
  EXPECT_THAT(word.err, HasSubstr("--sizes: 'lots' is not a size"));
  EXPECT_EQ(Leftovers(), 0u);
}

}  // namespace
