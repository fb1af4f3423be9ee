// The shim returns exactly what the driver returns for calls it rejects, and leaves
// the driver's outputs as they are. transparency_probe (a table of odd calls to every
// hand-written hook) runs on the simulated driver without and with the shim preloaded; every
// line (result and outputs) must match.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace {

std::vector<std::string> RunProbe(bool preload) {
  const std::string shim = std::getenv("CUSNAP_TEST_SHIM");
  const std::string command = std::string(preload ? "LD_PRELOAD=" + shim + " " : "") +
                              "LD_LIBRARY_PATH=" + std::getenv("CUSNAP_TEST_SIMCUDA_DIR") + " " +
                              CUSNAP_TEST_TRANSPARENCY_PROBE + " 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::vector<std::string> lines;
  if (pipe == nullptr) return lines;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    std::string line = buffer;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    lines.push_back(line);
  }
  ::pclose(pipe);
  return lines;
}

TEST(Transparency, EveryOddCallAnswersAsTheDriverDoes) {
  const std::string dir = cusnap::testing::MakeScratchDir("transparency");
  ASSERT_FALSE(dir.empty());
  cusnap::testing::UseOwnMachine(dir);
  struct Remove {
    std::string path;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove{dir};
  const std::vector<std::string> bare = RunProbe(false);
  const std::vector<std::string> shimmed = RunProbe(true);
  ASSERT_FALSE(bare.empty());
  ASSERT_EQ(bare.back(), "done");
  ASSERT_GE(bare.size(), 50u);
  ASSERT_EQ(shimmed.size(), bare.size());
  for (size_t i = 0; i < bare.size(); ++i) EXPECT_EQ(shimmed[i], bare[i]) << "line " << i;
  // The odd calls, as the simulated driver answers them (CUDA_ERROR_INVALID_VALUE = 1).
  EXPECT_THAT(bare, ::testing::Contains("release released|1|-"));
  EXPECT_THAT(bare, ::testing::Contains("export flags 1|1|kept"));
  EXPECT_THAT(bare, ::testing::Contains("export fabric of posix-only|1|kept"));
  EXPECT_THAT(bare, ::testing::Contains("multicast create size 0|1|kept"));
  EXPECT_THAT(bare, ::testing::Contains("set access flags 7|1|-"));
}

}  // namespace
