// Every setting of the settings table (common/settings.h), through the real `cusnap`: each
// value the table does not take is refused with exit 2 before anything starts, naming the
// variable and the value, by `cusnap run` (which checks every setting: the job inherits
// them) and by each command that reads it; a new setting of the table is covered here
// without a new test. A shim preloaded without `cusnap run` logs a value it does not take with
// the default it uses, and `cusnap status` shows it under the process. CUSNAP_LOG_FILE takes
// the log lines of every process of a job, off the job's stderr.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <sys/stat.h>
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

/// The whole of the file at `path` ("" when it cannot be read).
std::string ReadFile(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

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

  void ExpectEveryProcessLogsToTheFile(const std::string& setting);

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
  ::setenv("CUSNAP_LOG_FILE", "/nonexistent-cusnap-folder/shim.log", 1);
  job_ = Spawn({"/bin/sleep", "300"}, {{err, 2}});
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("CUSNAP_CARRIER");
  ::unsetenv("CUSNAP_CARRIER_THREADS");
  ::unsetenv("CUSNAP_LOG_FILE");
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
                              "from 1 to 64; using the default, 16, at most the CPUs the "
                              "process may run on";
  const std::string log_file = "CUSNAP_LOG_FILE='/nonexistent-cusnap-folder/shim.log' is not a "
                               "file one can append to (a writable file, or a new one in a "
                               "writable folder); using the default, the job's stderr";
  const std::string logged = ReadFile(log);
  EXPECT_THAT(logged, HasSubstr("cusnap[" + std::to_string(job_) + "] error: " + carrier));
  EXPECT_THAT(logged, HasSubstr(threads));
  EXPECT_THAT(logged, HasSubstr("cusnap[" + std::to_string(job_) + "] error: " + log_file));

  const Ran st = Cusnap({"status", "--pid", std::to_string(job_)});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("    setting not taken: " + carrier + "\n"));
  EXPECT_THAT(st.out, HasSubstr("    setting not taken: " + threads + "\n"));
  const Ran js = Cusnap({"status", "--pid", std::to_string(job_), "--json"});
  ASSERT_EQ(js.status, 0) << js.err;
  const auto doc = nlohmann::json::parse(js.out);
  EXPECT_EQ(doc["participants"][0]["settings_not_taken"],
            nlohmann::json::array({log_file, carrier, threads}));
}

/// Starts a job with CUSNAP_LOG_FILE=`setting` from dir_ whose processes work in /, and
/// expects the log lines of all of them in dir_/shim.log, none on the job's stderr.
void CliSettings::ExpectEveryProcessLogsToTheFile(const std::string& setting) {
  const std::string file = dir_ + "/shim.log", err_path = dir_ + "/job.err";
  const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(err, 0);
  ::setenv("CUSNAP_LOG", "info", 1);
  ::setenv("CUSNAP_LOG_FILE", setting.c_str(), 1);
  // The shell, the true it forks and runs, and the sleep the shell becomes: three shims, of
  // two processes (the job's own pid is the shell's and the sleep's).
  job_ = Spawn({"/bin/sh", "-c", "cd \"$0\" && exec \"$1\" run -- /bin/sh -c 'cd /; /bin/true; exec /bin/sleep 300'",
                dir_, Env("CUSNAP_TEST_BIN_DIR") + "/cusnap"},
               {{err, 2}});
  ::unsetenv("CUSNAP_LOG");
  ::unsetenv("CUSNAP_LOG_FILE");
  ::close(err);
  ASSERT_GT(job_, 0);
  const std::string listening = "] info: endpoint listening at ";
  const auto Listening = [&] {
    const std::string text = ReadFile(file);
    size_t count = 0;
    for (size_t at = text.find(listening); at != std::string::npos;
         at = text.find(listening, at + 1)) {
      ++count;
    }
    return count;
  };
  for (int i = 0; i < 600 && Listening() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Listening(), 3u) << ReadFile(file);
  const std::string text = ReadFile(file);
  EXPECT_THAT(text, HasSubstr("cusnap[" + std::to_string(job_) + "] info: endpoint listening at " +
                              dir_ + "/control/" + std::to_string(job_) + ".sock\n"));
  std::istringstream lines(text);
  size_t others = 0;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.rfind("cusnap[", 0), 0u) << "a line of its own: " << line;
    const bool own = line.rfind("cusnap[" + std::to_string(job_) + "]", 0) == 0;
    others += !own && line.find(listening) != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(others, 1u) << "the true's line: " << text;
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string job_err = ReadFile(err_path);
  EXPECT_THAT(job_err, ::testing::Not(HasSubstr("cusnap["))) << job_err;
}

TEST_F(CliSettings, ALogFileTakesTheLinesOfEveryProcessOfTheJobOffItsStderr) {
  ExpectEveryProcessLogsToTheFile(dir_ + "/shim.log");
}

// Relative to where `cusnap run` started, not to each process's working directory.
TEST_F(CliSettings, ARelativeLogFileIsTheOneBesideCusnapRunForEveryProcess) {
  ExpectEveryProcessLogsToTheFile("shim.log");
  EXPECT_FALSE(fs::exists("/shim.log"));
}

}  // namespace
}  // namespace cusnap::testing
