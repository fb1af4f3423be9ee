// The `cusnap` binary, run as a child process: --help of every command, usage errors and
// their exit status, `inspect` on a state file written here, `status` on an empty control
// directory, and refusals that happen before anything changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "coordinator/record/state_file.h"
#include "unit/coordinator_fixtures.h"
#include "scratch_dir.h"

namespace cusnap::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct Outcome {
  int status = -1;  ///< exit status, or 128 + signal
  std::string out, err;
};

/// Runs bin/cusnap with `args`; `env` entries are set (empty value: unset) in the child.
Outcome RunCusnap(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env = {}) {
  const char* bin_dir = std::getenv("CUSNAP_TEST_BIN_DIR");
  const std::string bin = std::string(bin_dir ? bin_dir : ".") + "/cusnap";
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& [k, v] : env) {
      if (v.empty()) {
        ::unsetenv(k.c_str());
      } else {
        ::setenv(k.c_str(), v.c_str(), 1);
      }
    }
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(126);
  }
  ::close(out[1]);
  ::close(err[1]);
  Outcome o;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? o.out : o.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
}

class CliTest : public ScratchDirTest {
 protected:
  CliTest() : ScratchDirTest("cli-test") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (HasFatalFailure()) return;
    ::mkdir((dir_ + "/control").c_str(), 0700);  // a control directory must be private
    env_ = {{"CUSNAP_CONTROL_DIR", dir_ + "/control"}, {"CUSNAP_DRIVER", "sim"},
            {"CUSNAP_STATE_DIR", ""}};
  }
  std::map<std::string, std::string> env_;
};

TEST_F(CliTest, HelpForEveryCommand) {
  const std::map<std::string, std::vector<std::string>> expected = {
      {"", {"run", "checkpoint", "restore", "status", "inspect", "demo", "Exit status: 0 success"}},
      {"run", {"cusnap run [--pid-namespace] [--] COMMAND [ARGS...]", "--pid-namespace"}},
      {"checkpoint", {"--pid", "--all", "--state-dir", "--lock-timeout-ms", "--json"}},
      {"restore", {"--pid", "--all", "--state-dir", "--device-map", "--json"}},
      {"status", {"--pid", "--all", "--json"}},
      {"inspect", {"state_dir", "--json"}},
      {"demo", {"two-process sharing demo"}},
  };
  for (const auto& [command, words] : expected) {
    std::vector<std::string> args;
    if (!command.empty()) args.push_back(command);
    args.push_back("--help");
    const auto o = RunCusnap(args, env_);
    EXPECT_EQ(o.status, 0) << command << ": " << o.err;
    for (const auto& w : words) EXPECT_THAT(o.out, HasSubstr(w)) << command;
  }
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"checkpoint"},
      {"checkpoint", "--pid", "1", "--all"},
      {"checkpoint", "--pid", "abc"},
      {"checkpoint", "--pid", "0"},
      {"checkpoint", "--all", "--lock-timeout-ms", "-5"},
      {"restore"},
      {"restore", "--pid", "1", "--device-map", "0=x"},
      {"status", "--pid", "1", "--all"},
      {"run"},
      {"run", "--"},
  };
  for (const auto& args : bad) {
    const auto o = RunCusnap(args, env_);
    EXPECT_EQ(o.status, 2) << ::testing::PrintToString(args) << "\n" << o.out << o.err;
    EXPECT_FALSE(o.err.empty()) << ::testing::PrintToString(args);
  }
  const auto o = RunCusnap({"restore", "--pid", "2", "--device-map", "0=1,0x"}, env_);
  EXPECT_EQ(o.err, "cusnap restore: --device-map: device map pair '0x' is not of the form "
                   "OLD=NEW\n");
}

// The shim goes first on LD_PRELOAD and the simulated driver first on LD_LIBRARY_PATH, what
// was there is kept, and the rest of the environment passes through.
TEST_F(CliTest, RunPrependsTheShimAndKeepsTheEnvironment) {
  auto env = env_;
  env["LD_PRELOAD"] = "/nonexistent/old-preload.so";  // the loader warns and carries on
  env["LD_LIBRARY_PATH"] = "/old/lib";
  env["CUSNAP_TEST_MARKER"] = "kept";
  const auto o = RunCusnap({"run", "--", "/bin/sh", "-c",
                            "echo \"$LD_PRELOAD\"; echo \"$LD_LIBRARY_PATH\"; echo \"$CUSNAP_TEST_MARKER\""},
                           env);
  EXPECT_EQ(o.status, 0) << o.err;
  const std::string bin = std::getenv("CUSNAP_TEST_BIN_DIR");
  EXPECT_EQ(o.out, bin + "/../lib/libcusnap.so:/nonexistent/old-preload.so\n" + bin +
                       "/../simcuda:/old/lib\nkept\n");
  // Without "--" as well.
  const auto plain = RunCusnap({"run", "/bin/sh", "-c", "echo \"$CUSNAP_TEST_MARKER\""}, env);
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out, "kept\n");
}

TEST_F(CliTest, RunReportsAMissingProgram) {
  const auto o = RunCusnap({"run", "--", dir_ + "/no-such-program"}, env_);
  EXPECT_EQ(o.status, 127);
  EXPECT_EQ(o.err, "cusnap run: cannot execute " + dir_ + "/no-such-program: No such file or directory\n");
}

TEST_F(CliTest, BadDriverChoiceIsNamed) {
  auto env = env_;
  env["CUSNAP_DRIVER"] = "quantum";
  const auto o = RunCusnap({"run", "--", "true"}, env);
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "cusnap run: CUSNAP_DRIVER='quantum' is not one of auto, real, sim; the job "
                   "was not started\n");
  const auto c = RunCusnap({"checkpoint", "--all"}, env);
  EXPECT_EQ(c.status, 2);
  EXPECT_EQ(c.err, "cusnap checkpoint: CUSNAP_DRIVER='quantum' is not one of auto, real, sim; "
                   "nothing was changed\n");
}

// CUSNAP_DRIVER=real where no libcuda.so.1 can be loaded (this CI machine): exit 1, the
// loader's reason, that nothing was changed, and the way to the simulated driver.
TEST_F(CliTest, UnloadableRealDriverSaysNothingChangedAndHowToUseTheSimulatedOne) {
  if (void* real = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    ::dlclose(real);
    GTEST_SKIP() << "a libcuda.so.1 loads here";
  }
  auto env = env_;
  env["CUSNAP_DRIVER"] = "real";
  // A --pid target: `--all` with no endpoint would refuse without loading any driver.
  const std::string self = std::to_string(::getpid());
  const auto o = RunCusnap({"checkpoint", "--pid", self, "--state-dir", dir_ + "/state"}, env);
  EXPECT_EQ(o.status, 1) << o.out << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "cusnap checkpoint: cannot load the CUDA driver: libcuda.so.1: cannot open "
                   "shared object file: No such file or directory; set CUSNAP_DRIVER=sim to use "
                   "the simulated driver; nothing was changed\n");
  EXPECT_FALSE(fs::exists(dir_ + "/state"));
  const auto json = RunCusnap({"restore", "--pid", self, "--json"}, env);
  EXPECT_EQ(json.status, 1);
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["exit_code"], 1);
  EXPECT_THAT(doc["errors"][0].get<std::string>(), HasSubstr("; nothing was changed"));
  const auto help = RunCusnap({"--help"}, env_);
  EXPECT_THAT(help.out, HasSubstr("1 other error (e.g. the CUDA driver cannot be loaded: the job "
                                  "is not changed)"));
}

TEST_F(CliTest, InspectShowsAStateFile) {
  coord::StateFile state;
  state.driver = "simulated";
  state.created_unix_s = 1764489600;
  state.checkpoint_id = "692c9a00-0123456789abcdef";
  for (const auto& v : ValidJob()) {
    coord::ParticipantState p;
    p.pid = v.pid;
    p.start_time = v.start_time;
    p.saved_bytes = v.pid == 100 ? kMiB2 : 0;
    p.records = v.records;
    p.gpus = {{0, "GPU-00000000-0000-0000-0000-000000000000"}};
    state.participants.push_back(p);
  }
  state.phases = {{"save", 1.5, kMiB2}};
  ASSERT_TRUE(coord::WriteStateFile(dir_, state).ok());

  const auto text = RunCusnap({"inspect", dir_}, env_);
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("format version " + std::to_string(coord::kStateFormatVersion) +
                                  ", driver simulated, written 2025-11-30 08:00:00 UTC, "
                                  "checkpoint 692c9a00-0123456789abcdef"));
  EXPECT_THAT(text.out, HasSubstr("2 participants"));
  EXPECT_THAT(text.out, HasSubstr("pid 100 (start 5000): 2.00 MiB saved, 1 allocation, 1 mapping\n"));
  EXPECT_THAT(text.out, HasSubstr("allocation 1 of pid 100: 2.00 MiB, created here"));
  EXPECT_THAT(text.out, HasSubstr("mapping 0x7e0000000000+2.00 MiB of allocation 1 of pid 100"));
  EXPECT_THAT(text.out, HasSubstr("device 0: GPU-00000000-0000-0000-0000-000000000000"));

  const auto json = RunCusnap({"inspect", dir_, "--json"}, env_);
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out), coord::StateToJson(state));
}

TEST_F(CliTest, InspectErrorsExitOne) {
  const auto missing = RunCusnap({"inspect", dir_}, env_);
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.err, "cusnap inspect: no checkpoint in " + dir_ + ": " + dir_ +
                             "/cusnap-state.json does not exist\n");
  std::ofstream(coord::StateFilePath(dir_)) << "{]";
  const auto corrupt = RunCusnap({"inspect", dir_}, env_);
  EXPECT_EQ(corrupt.status, 1);
  EXPECT_EQ(corrupt.err, "cusnap inspect: " + dir_ + "/cusnap-state.json: corrupt state file (not valid JSON)\n");
}

TEST_F(CliTest, StatusOnAnEmptyControlDir) {
  const auto text = RunCusnap({"status"}, env_);
  EXPECT_EQ(text.status, 0) << text.err;
  // Jobs of other tests may run meanwhile, in control directories of their own: named after.
  EXPECT_THAT(text.out, StartsWith("control dir: " + dir_ + "/control\nno participants\n"));
  const auto json = RunCusnap({"status", "--json"}, env_);
  EXPECT_EQ(json.status, 0) << json.err;
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["control_dir"], dir_ + "/control");
  EXPECT_TRUE(doc["participants"].empty());
}

// The demo itself runs in cli_demo_test.cc; here only its argument check (nothing started).
TEST_F(CliTest, DemoRefusesBadSizes) {
  const auto o = RunCusnap({"demo", "--sizes", "2M"}, env_);
  EXPECT_EQ(o.status, 2);
  EXPECT_THAT(o.err, HasSubstr("--sizes: give exactly three sizes"));
}

// The test process's own tree has no endpoint: refused before anything changes (exit 3),
// on the simulated driver, which the CLI names.
TEST_F(CliTest, CheckpointOfATreeWithoutEndpointsIsRefused) {
  const std::string pid = std::to_string(::getpid());
  const auto o = RunCusnap({"checkpoint", "--pid", pid, "--state-dir", dir_ + "/state"}, env_);
  EXPECT_EQ(o.status, 3) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("driver: simulated\n"));
  EXPECT_THAT(o.out, HasSubstr("discover "));
  EXPECT_THAT(o.err, HasSubstr("cusnap checkpoint: pid " + pid + ": no process in its tree has "
                               "a cusnap endpoint in " + dir_ + "/control; start the job with "
                               "'cusnap run'\n"));
  EXPECT_THAT(o.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  EXPECT_FALSE(fs::exists(dir_ + "/state"));

  const auto json = RunCusnap({"checkpoint", "--all", "--json"}, env_);
  EXPECT_EQ(json.status, 3);
  const auto doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["outcome"], "refused");
  EXPECT_EQ(doc["exit_code"], 3);
  EXPECT_EQ(doc["driver"], "not loaded (no cusnap endpoint to act on)");
  EXPECT_EQ(doc["phases"][0]["name"], "discover");
  EXPECT_THAT(doc["errors"][0].get<std::string>(),
              StartsWith("no live cusnap endpoint in " + dir_ + "/control"));
}

// `--all` with no endpoint needs no driver and loads none (cuInit would be most of the
// answer's time on a GPU machine): with a driver whose cuInit fails, the refusal is the same;
// a --pid target loads the driver first and names its failure (exit 1), untouched.
TEST_F(CliTest, CheckpointOfAllWithoutEndpointsIsRefusedWithoutLoadingTheDriver) {
  auto env = env_;
  env["SIMCUDA_FAULTS"] = "cuInit:1:3";
  const auto all = RunCusnap({"checkpoint", "--all", "--state-dir", dir_ + "/state"}, env);
  EXPECT_EQ(all.status, 3) << all.out << all.err;
  EXPECT_THAT(all.out, Not(HasSubstr("driver:")));
  EXPECT_THAT(all.err, HasSubstr("no live cusnap endpoint in " + dir_ + "/control"));
  const auto tree = RunCusnap({"checkpoint", "--pid", std::to_string(::getpid()), "--state-dir", dir_ + "/state"}, env);
  EXPECT_EQ(tree.status, 1) << tree.out << tree.err;
  EXPECT_THAT(tree.err, HasSubstr("cuInit"));
  EXPECT_FALSE(fs::exists(dir_ + "/state"));
}

TEST_F(CliTest, RestoreWithoutAStateFileIsRefused) {
  auto env = env_;
  env["CUSNAP_STATE_DIR"] = dir_ + "/nothing-here";  // the default state dir comes from env
  const auto o = RunCusnap({"restore", "--all"}, env);
  EXPECT_EQ(o.status, 5) << o.out << o.err;
  EXPECT_THAT(o.err, HasSubstr("cusnap restore: no checkpoint in " + dir_ + "/nothing-here: " +
                               dir_ + "/nothing-here/cusnap-state.json does not exist\n"));
}

}  // namespace
}  // namespace cusnap::testing
