// Every setting of the settings table (common/settings.h), through the real `cusnap`: each
// value the table does not take is refused with exit 2 before anything starts, naming the
// variable and the value, by `cusnap run` (which checks every setting: the job inherits
// them) and by each command that reads it; a new setting of the table is covered here
// without a new test. A shim preloaded without `cusnap run` logs a value it does not take with
// the default it uses, and `cusnap status` shows it under the process.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/settings.h"

namespace cusnap::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kExitUsage = 2;

class CliSettings : public OwnMachineTest {
 protected:
  CliSettings() : OwnMachineTest("settings") {}
  void TearDown() override {
    if (job_ > 0) {
      ::kill(job_, SIGKILL);
      ::waitpid(job_, nullptr, 0);
    }
    OwnMachineTest::TearDown();
  }

  /// A command line of `command` that would act if its settings were taken; "" for a reader
  /// that is no command (the shim, the CRIU plugin: `run` stands for the shim).
  std::vector<std::string> CommandLine(const std::string& command) const {
    const std::string state = dir_ + "/state";
    if (command == "run") return {"run", "--", "/usr/bin/touch", Marker()};
    if (command == "checkpoint" || command == "restore" || command == "recover") {
      return {command, "--all", "--state-dir", state};
    }
    if (command == "dump") {
      return {"dump", "--pid", std::to_string(::getpid()), "--images-dir", dir_ + "/images"};
    }
    if (command == "status") return {"status"};
    if (command == "inspect") return {"inspect", state};
    if (command == "demo") return {"demo"};
    return {};
  }

  std::string Marker() const { return dir_ + "/started"; }

  pid_t job_ = -1;
};

TEST_F(CliSettings, EveryBadValueIsRefusedByRunAndByEveryCommandThatReadsIt) {
  size_t refusals = 0;
  for (const settings::Setting* setting : settings::kAll) {
    std::vector<std::string> commands = {"run", "demo"};
    for (size_t bit = 0; bit < std::size(settings::kReaderNames); ++bit) {
      if ((setting->readers & (1u << bit)) != 0) commands.push_back(settings::kReaderNames[bit]);
    }
    for (const std::string& bad : settings::BadValues(*setting)) {
      ::setenv(setting->name, bad.c_str(), 1);
      for (const std::string& command : commands) {
        const std::vector<std::string> args = CommandLine(command);
        if (args.empty()) continue;
        SCOPED_TRACE(std::string(setting->name) + "='" + bad + "' cusnap " + command);
        const Ran r = Cusnap(args);
        EXPECT_EQ(r.status, kExitUsage) << r.out << r.err;
        EXPECT_THAT(r.err, HasSubstr("cusnap " + command + ": " +
                                     settings::Refusal(*setting, bad)));
        EXPECT_EQ(r.out, "");
        ++refusals;
      }
      ::unsetenv(setting->name);
    }
  }
  EXPECT_FALSE(fs::exists(Marker())) << "a job must not start";
  EXPECT_FALSE(fs::exists(dir_ + "/state"));
  EXPECT_FALSE(fs::exists(dir_ + "/images"));
  EXPECT_GT(refusals, 50u);
}

TEST_F(CliSettings, ASettingNoCommandReadsIsNotRefusedByThatCommand) {
  ::setenv("CUSNAP_CARRIER", "bogus", 1);
  const Ran inspect = Cusnap({"inspect", dir_ + "/none"});
  EXPECT_THAT(inspect.err, ::testing::Not(HasSubstr("CUSNAP_CARRIER")));
  const Ran status = Cusnap({"status"});
  EXPECT_EQ(status.status, 0) << status.err;
  ::unsetenv("CUSNAP_CARRIER");
}

TEST_F(CliSettings, AShimPreloadedWithoutRunLogsABadValueAndStatusShowsIt) {
  const std::string log = dir_ + "/job.err";
  const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(err, 0);
  ::setenv("LD_PRELOAD", Env("CUSNAP_TEST_SHIM").c_str(), 1);
  ::setenv("CUSNAP_CARRIER", "bogus", 1);
  ::setenv("CUSNAP_CARRIER_THREADS", "0", 1);
  job_ = Spawn({"/bin/sleep", "300"}, {{err, 2}});
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("CUSNAP_CARRIER");
  ::unsetenv("CUSNAP_CARRIER_THREADS");
  ::close(err);
  ASSERT_GT(job_, 0);
  const std::string socket = dir_ + "/control/" + std::to_string(job_) + ".sock";
  for (int i = 0; i < 600 && !fs::exists(socket); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(socket));

  const std::string carrier =
      "CUSNAP_CARRIER='bogus' is not one of lazy, eager; using the default, lazy";
  const std::string threads = "CUSNAP_CARRIER_THREADS='0' is not a whole number of threads "
                              "from 1 to 64; using the default, 8";
  std::stringstream logged;
  logged << std::ifstream(log).rdbuf();
  EXPECT_THAT(logged.str(), HasSubstr("cusnap[" + std::to_string(job_) + "] error: " + carrier));
  EXPECT_THAT(logged.str(), HasSubstr(threads));

  const Ran st = Cusnap({"status", "--pid", std::to_string(job_)});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("    setting not taken: " + carrier + "\n"));
  EXPECT_THAT(st.out, HasSubstr("    setting not taken: " + threads + "\n"));
  const Ran js = Cusnap({"status", "--pid", std::to_string(job_), "--json"});
  ASSERT_EQ(js.status, 0) << js.err;
  const auto doc = nlohmann::json::parse(js.out);
  EXPECT_EQ(doc["participants"][0]["settings_not_taken"],
            nlohmann::json::array({carrier, threads}));
}

}  // namespace
}  // namespace cusnap::testing
