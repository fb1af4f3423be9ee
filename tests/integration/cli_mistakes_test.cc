// A new user's mistakes, met through the real `cusnap` binary: each is named before
// anything changes, and the exit status says so. Bad settings (CUSNAP_LOG, CUSNAP_CARRIER,
// SIMCUDA_DELAYS, an empty --state-dir, --pid 1) exit 2 naming the setting and the values it
// takes; a --pid that is a thread, another user's process, a missing process, or a process
// whose pid reused a stale endpoint is refused (exit 3) with what it really is; an unreadable
// control directory is "Permission denied", not "no participants"; a control directory too
// long for a socket path stops `cusnap run` before the job starts; a state directory keeps its
// mode (and an unsafe one is refused). Also: the automatic driver probe never crashes and
// names the simulated driver, `--version`, `status --prune` and `completion bash`.
#include <gmock/gmock.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace cusnap::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kExitUsage = 2;
constexpr int kExitRefused = 3;
constexpr int kExitRestoreRefused = 5;

class CliMistakes : public OwnMachineTest {
 protected:
  CliMistakes() : OwnMachineTest("mistakes") {}
  void TearDown() override {
    for (pid_t pid : jobs_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    OwnMachineTest::TearDown();
  }

  std::string Bin() const { return Env("CUSNAP_TEST_BIN_DIR") + "/cusnap"; }
  std::string Control() const { return dir_ + "/control"; }

  /// Starts `cusnap run -- sleep 300` (a trivial job: the shim's endpoint, no CUDA) and waits
  /// until its endpoint socket exists. Returns its pid (the sleep; `run` execs it).
  pid_t StartSleepJob() {
    const pid_t pid = Spawn({Bin(), "run", "--", "sleep", "300"}, {});
    EXPECT_GT(pid, 0);
    jobs_.push_back(pid);
    const std::string socket = Control() + "/" + std::to_string(pid) + ".sock";
    for (int i = 0; i < 600 && !fs::exists(socket); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(fs::exists(socket)) << socket;
    return pid;
  }

  /// A plain `sleep 300` without the shim.
  pid_t StartBareSleep() {
    const pid_t pid = Spawn({"/bin/sleep", "300"}, {});
    EXPECT_GT(pid, 0);
    jobs_.push_back(pid);
    return pid;
  }

  /// Leaves an endpoint socket <control>/<pid>.sock that nobody listens on, dated an hour
  /// back: what a crashed job leaves when a later process gets its pid.
  std::string PlantStaleSocket(pid_t pid) {
    const std::string path = Control() + "/" + std::to_string(pid) + ".sock";
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
    ::close(fd);
    timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= 3600;
    times[1] = times[0];
    EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    return path;
  }

  /// `cusnap args...` as another user (uid/gid 65534, through setpriv) when we are root;
  /// status -1 (and a skip reason in err) otherwise.
  Ran CusnapAsNobody(const std::vector<std::string>& args) {
    Ran r;
    if (::geteuid() != 0 || !fs::exists("/usr/bin/setpriv")) {
      r.err = "needs root and setpriv";
      return r;
    }
    std::string command = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups " + Bin();
    for (const auto& a : args) command += " '" + a + "'";
    return RunCommand(command, dir_);
  }

  std::vector<pid_t> jobs_;
};

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// ---- The automatic driver probe ----

// With the simulated libcuda.so.1 on the library path and CUSNAP_DRIVER unset, the probe
// must not unload a driver whose thread still runs (`cusnap run` would crash now and then).
TEST_F(CliMistakes, AutoProbeOfASimulatedDriverOnTheLibraryPathNeverCrashesAndSaysSimulated) {
  ::unsetenv("CUSNAP_DRIVER");
  ::setenv("LD_LIBRARY_PATH", Env("CUSNAP_TEST_SIMCUDA_DIR").c_str(), 1);
  for (int i = 0; i < 40; ++i) {
    const Ran r = Cusnap({"run", "--", "true"});
    ASSERT_EQ(r.status, 0) << "run " << i << ": " << r.err;
  }
  // A --pid target (this test's tree, no endpoint): the command loads the driver first.
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(::getpid()), "--state-dir", dir_ + "/state"});
  EXPECT_THAT(ck.out, HasSubstr("driver: simulated\n"));
  EXPECT_THAT(ck.out, Not(HasSubstr("NVIDIA")));
  ::unsetenv("LD_LIBRARY_PATH");
}

// ---- Bad settings: exit 2, the setting and its values named ----

TEST_F(CliMistakes, BadSettingsAreRefusedNamingTheValuesTheyAccept) {
  const std::string marker = dir_ + "/ran";
  ::setenv("CUSNAP_LOG", "bogus", 1);
  Ran r = Cusnap({"run", "--", "touch", marker});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("CUSNAP_LOG='bogus' is not one of error, warn, info, debug"));
  ::setenv("CUSNAP_LOG", "warn", 1);
  ::setenv("CUSNAP_CARRIER", "bogus", 1);
  r = Cusnap({"run", "--", "touch", marker});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("CUSNAP_CARRIER='bogus' is not one of lazy, eager"));
  ::unsetenv("CUSNAP_CARRIER");
  EXPECT_FALSE(fs::exists(marker)) << "the job must not start";

  ::setenv("SIMCUDA_DELAYS", "cuBogus:5", 1);
  r = Cusnap({"checkpoint", "--pid", std::to_string(::getpid()), "--state-dir", dir_ + "/state"});
  ::unsetenv("SIMCUDA_DELAYS");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("SIMCUDA_DELAYS='cuBogus:5': 'cuBogus' is not an entry point of "
                               "the simulated driver"));
  EXPECT_THAT(r.err, HasSubstr("nothing was changed"));

  const pid_t job = StartSleepJob();
  r = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", ""});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--state-dir is empty"));
  EXPECT_FALSE(fs::exists("cusnap-state"));
  r = Cusnap({"checkpoint", "--pid", "1", "--state-dir", dir_ + "/state"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--pid 1 is init: its process tree is every process of the "
                               "machine; give the job's own pid, or --all"));
  EXPECT_FALSE(fs::exists(dir_ + "/state"));
}

// ---- A mistyped option: the nearest option named, as for a mistyped command ----

TEST_F(CliMistakes, AMistypedOptionIsAnsweredWithTheNearestOne) {
  Ran r = Cusnap({"checkpoint", "--statedir", "x", "--all"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, ::testing::StartsWith("cusnap checkpoint: The following arguments were not "
                                           "expected: "));
  EXPECT_THAT(r.err, HasSubstr("; did you mean '--state-dir' for '--statedir'?\nRun 'cusnap "
                               "checkpoint --help' for more information.\n"));
  EXPECT_FALSE(fs::exists("x"));
  r = Cusnap({"restore", "--all", "--devicemap=0=1"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("did you mean '--device-map' for '--devicemap'?"));
  r = Cusnap({"status", "--pdi", "5"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("did you mean '--pid' for '--pdi'?"));
  r = Cusnap({"status", "--frobnicate"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, Not(HasSubstr("did you mean")));
  // The typo of the option a command requires one of (--pid or --all) is named, not the
  // requirement it leaves unmet.
  r = Cusnap({"checkpoint", "--pdi", "123"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_EQ(r.err, "cusnap checkpoint: The following arguments were not expected: --pdi 123; did "
                   "you mean '--pid' for '--pdi'?\nRun 'cusnap checkpoint --help' for more "
                   "information.\n");
}

// ---- Misleading messages replaced ----

TEST_F(CliMistakes, AMissingPidIsNamedWithoutClaimingAJobKeepsRunning) {
  const pid_t gone = StartBareSleep();
  ::kill(gone, SIGKILL);
  ::waitpid(gone, nullptr, 0);
  jobs_.clear();
  const Ran r = Cusnap({"checkpoint", "--pid", std::to_string(gone), "--state-dir", dir_ + "/s"});
  EXPECT_EQ(r.status, kExitRefused);
  EXPECT_THAT(r.err, HasSubstr("pid " + std::to_string(gone) + " does not exist; nothing was changed"));
  EXPECT_THAT(r.err, Not(HasSubstr("keeps running")));
}

TEST_F(CliMistakes, AThreadIdIsNamedAsAThreadOfItsProcess) {
  std::promise<long> tid;
  std::promise<void> done;
  std::thread thread([&] {
    tid.set_value(::syscall(SYS_gettid));
    done.get_future().wait();
  });
  const std::string t = std::to_string(tid.get_future().get());
  const Ran r = Cusnap({"checkpoint", "--pid", t, "--state-dir", dir_ + "/s"});
  done.set_value();
  thread.join();
  EXPECT_EQ(r.status, kExitRefused);
  EXPECT_THAT(r.err, HasSubstr("pid " + t + " is thread " + t + " of process " +
                               std::to_string(::getpid()) + ", not a process: give --pid " +
                               std::to_string(::getpid())));
  EXPECT_THAT(r.err, Not(HasSubstr("cusnap run'")));
}

TEST_F(CliMistakes, AnotherUsersJobNamesTheControlDirectorySearched) {
  const pid_t job = StartSleepJob();  // ours (root's); cusnap runs as uid 65534
  const Ran r = CusnapAsNobody({"checkpoint", "--pid", std::to_string(job), "--state-dir",
                                "/tmp/never-" + std::to_string(job)});
  if (r.status == -1 && r.err == "needs root and setpriv") GTEST_SKIP() << r.err;
  EXPECT_EQ(r.status, kExitRefused) << r.err;
  EXPECT_THAT(r.err, HasSubstr("belongs to uid " + std::to_string(::geteuid()) +
                               ", not to this user (uid 65534); cusnap looks for endpoints in " +
                               Control()));
  EXPECT_THAT(r.err, HasSubstr("CUSNAP_CONTROL_DIR"));
  EXPECT_THAT(r.err, Not(HasSubstr("start it with")));
}

TEST_F(CliMistakes, AnUnreadableControlDirectoryIsPermissionDeniedNotNoParticipants) {
  StartSleepJob();  // an endpoint there that status must not pretend is absent
  ASSERT_EQ(::chmod(Control().c_str(), 0700), 0);
  const Ran r = CusnapAsNobody({"status"});
  if (r.status == -1 && r.err == "needs root and setpriv") GTEST_SKIP() << r.err;
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot read control directory " + Control() + ": Permission denied"));
  EXPECT_THAT(r.out, Not(HasSubstr("no participants")));
}

TEST_F(CliMistakes, AStaleEndpointOfAReusedPidIsNamedAndPruneRemovesOnlyStaleOnes) {
  const pid_t live = StartSleepJob();
  const pid_t reused = StartBareSleep();
  const std::string stale = PlantStaleSocket(reused);
  const std::string live_socket = Control() + "/" + std::to_string(live) + ".sock";

  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(reused), "--state-dir", dir_ + "/s"});
  EXPECT_EQ(ck.status, kExitRefused);
  EXPECT_THAT(ck.err, HasSubstr("endpoint " + stale + " is stale: pid " + std::to_string(reused) +
                                " was reused by a later process (sleep)"));
  EXPECT_THAT(ck.err, HasSubstr("cusnap status --prune"));
  EXPECT_THAT(ck.err, Not(HasSubstr("start it with")));

  const Ran st = Cusnap({"status"});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("stale endpoint " + stale + ": pid " + std::to_string(reused) +
                                " was reused by a later process (sleep) (safe to remove)"));
  EXPECT_THAT(st.out, HasSubstr("pid " + std::to_string(live)));

  const Ran pruned = Cusnap({"status", "--prune"});
  EXPECT_EQ(pruned.status, 0) << pruned.err;
  EXPECT_THAT(pruned.out, HasSubstr("stale endpoint " + stale));
  EXPECT_THAT(pruned.out, HasSubstr("(removed)"));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live_socket)) << "a live endpoint is never pruned";
}

TEST_F(CliMistakes, AControlDirectoryTooLongForASocketStopsRunBeforeTheJobStarts) {
  const std::string deep = dir_ + "/" + std::string(100, 'd');
  ::setenv("CUSNAP_CONTROL_DIR", deep.c_str(), 1);
  const std::string marker = dir_ + "/ran";
  const Ran r = Cusnap({"run", "--", "touch", marker});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("the control directory " + deep + " (CUSNAP_CONTROL_DIR) is " +
                               std::to_string(deep.size()) + " bytes long"));
  EXPECT_THAT(r.err, HasSubstr("107-byte limit of a unix socket path"));
  EXPECT_THAT(r.err, Not(HasSubstr("File name too long")));
  EXPECT_FALSE(fs::exists(marker)) << "the job must not start";
}

// ---- The state directory's mode ----

TEST_F(CliMistakes, CheckpointKeepsAnExistingStateDirectorysModeAndCreatesNewOnes0700) {
  const pid_t job = StartSleepJob();
  const std::string kept = dir_ + "/kept";
  ASSERT_EQ(::mkdir(kept.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(kept.c_str(), 0755), 0);
  Ran r = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", kept});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(ModeOf(kept), 0755u);
  r = Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", kept});
  ASSERT_EQ(r.status, 0) << r.out << r.err;

  const std::string made = dir_ + "/new/state";
  r = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", made});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(ModeOf(dir_ + "/new"), 0700u);
  EXPECT_EQ(ModeOf(made), 0700u);
  r = Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", made});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
}

TEST_F(CliMistakes, ASharedStickyStateDirectoryIsRefusedAndKeepsItsMode) {
  const pid_t job = StartSleepJob();
  const std::string shared = dir_ + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);  // like /tmp
  const Ran r = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", shared});
  EXPECT_EQ(r.status, kExitRefused) << r.out;
  EXPECT_THAT(r.err, HasSubstr("state directory " + shared + " is unsafe: it is writable by "
                               "others (mode 1777)"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_EQ(ModeOf(shared), 01777u);
  EXPECT_FALSE(fs::exists(shared + "/cusnap-state.json"));
  const Ran st = Cusnap({"status", "--pid", std::to_string(job), "--json"});
  EXPECT_EQ(nlohmann::json::parse(st.out)["participants"][0]["phase"], "active") << st.out;
}

// ---- Small ones: JSON phase counts, inspect of a corrupt file and of the phases ----

TEST_F(CliMistakes, CoordinatorOnlyPhasesCountTheCommandsParticipantsInJson) {
  const pid_t job = StartSleepJob();
  const std::string state = dir_ + "/state";
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", state, "--json"});
  ASSERT_EQ(ck.status, 0) << ck.err;
  const Ran rs = Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", state, "--json"});
  ASSERT_EQ(rs.status, 0) << rs.err;
  std::map<std::string, nlohmann::json> phases;
  for (const Ran* r : {&ck, &rs}) {
    const auto doc = nlohmann::json::parse(r->out);
    for (const auto& ph : doc["phases"]) phases[ph["name"].get<std::string>()] = ph;
  }
  EXPECT_EQ(phases["write_state"]["participants"], 1) << phases["write_state"];
  EXPECT_EQ(phases["read_state"]["participants"], 1) << phases["read_state"];
  EXPECT_EQ(phases["write_state"]["coordinator_only"], true);
  EXPECT_EQ(phases["read_state"]["coordinator_only"], true);
  EXPECT_EQ(phases["quiesce"]["participants"], 1);

  const Ran in = Cusnap({"inspect", state});
  EXPECT_THAT(in.out, HasSubstr("phases write_state, commit, detach_multicast, release, lock and "
                                "checkpoint (and a dump's write_carriers) ran while and after "
                                "this file was written"));
}

TEST_F(CliMistakes, InspectJsonOfACorruptStateFileIsStillJson) {
  const std::string state = dir_ + "/state";
  fs::create_directory(state);
  std::ofstream(state + "/cusnap-state.json") << "{\"format_version\": ";
  const Ran r = Cusnap({"inspect", state, "--json"});
  EXPECT_EQ(r.status, 1);
  const auto doc = nlohmann::json::parse(r.out);  // throws (fails the test) when not JSON
  EXPECT_EQ(doc["state_dir"], state);
  EXPECT_EQ(doc["exit_code"], 1);
  EXPECT_THAT(doc["errors"][0].get<std::string>(), HasSubstr("corrupt state file"));
}

// Under --json every answer is one document with a report's keys: a usage error and a
// refusal before any phase too (not text alone, nor JSON without "phases": a script reads
// "phases").
TEST_F(CliMistakes, EveryAnswerUnderJsonIsADocumentWithAReportsKeys) {
  const Ran usage = Cusnap({"checkpoint", "--json", "--pid", "abc"});
  EXPECT_EQ(usage.status, 2);
  const auto bad = nlohmann::json::parse(usage.out);  // throws (fails the test) when not JSON
  const Ran gone = Cusnap({"restore", "--pid", "4194303", "--json", "--state-dir", dir_ + "/s"});
  EXPECT_NE(gone.status, 0);
  const auto early = nlohmann::json::parse(gone.out);
  ::setenv("CUSNAP_LEASE_MS", "abc", 1);
  const Ran setting = Cusnap({"checkpoint", "--all", "--json"});
  ::unsetenv("CUSNAP_LEASE_MS");
  EXPECT_EQ(setting.status, 2);
  const auto refused = nlohmann::json::parse(setting.out);
  EXPECT_THAT(refused["errors"][0].get<std::string>(), HasSubstr("CUSNAP_LEASE_MS='abc'"));
  for (const auto& doc : {bad, early, refused}) {
    for (const char* key : {"command", "exit_code", "outcome", "phases", "errors", "notes"}) {
      EXPECT_TRUE(doc.contains(key)) << key << " missing in " << doc.dump();
    }
    EXPECT_TRUE(doc["phases"].empty()) << doc.dump();
  }
  EXPECT_EQ(bad["exit_code"], 2);
  EXPECT_THAT(bad["errors"][0].get<std::string>(), HasSubstr("'abc' is not a number"));
  EXPECT_EQ(early["exit_code"], gone.status);
  EXPECT_THAT(usage.err, HasSubstr("Run 'cusnap checkpoint --help'"));  // the text stays on stderr
}

TEST_F(CliMistakes, StatusHelpSaysAtMostOneTargetAndNotExactlyOne) {
  const Ran r = Cusnap({"status", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("which processes (at most one of; neither: every endpoint in the "
                               "control directory)"));
  EXPECT_THAT(r.out, Not(HasSubstr("exactly one of")));
  EXPECT_THAT(r.out, HasSubstr("--prune"));
  // Only the statuses status can end with.
  EXPECT_THAT(r.out, HasSubstr("Exit status: 0 success; 1 other error"));
  EXPECT_THAT(r.out, Not(HasSubstr("3 checkpoint refused")));
}

TEST_F(CliMistakes, RestoreHelpSaysWhatNeitherTargetMeansAndItsOwnStatuses) {
  const Ran r = Cusnap({"restore", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("neither: --images-dir, the job of a dump"));
  EXPECT_THAT(r.out, HasSubstr("5 restore refused before any change"));
  EXPECT_THAT(r.out, Not(HasSubstr("3 checkpoint refused")));
  const Ran completion = Cusnap({"completion", "--help"});
  EXPECT_THAT(completion.out, HasSubstr("Exit status: 0 success; 2 usage."));
  const Ran top = Cusnap({"--help"});
  EXPECT_THAT(top.out, HasSubstr("3 checkpoint refused before any change"));
  EXPECT_THAT(top.out, HasSubstr("5 restore refused before any change"));
}

TEST_F(CliMistakes, InspectOfAMissingDirectorySaysItDoesNotExist) {
  const Ran r = Cusnap({"inspect", dir_ + "/nothing"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.err, HasSubstr("cusnap inspect: " + dir_ + "/nothing does not exist\n"));
}

TEST_F(CliMistakes, DumpOfInitSuggestsNoAllWhichDumpLacks) {
  const Ran r = Cusnap({"dump", "--pid", "1", "--images-dir", dir_ + "/images"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--pid 1 is init: its process tree is every process of the "
                               "machine; give the job's own pid\n"));
  EXPECT_FALSE(fs::exists(dir_ + "/images"));
}

// ---- Version, completion ----

TEST_F(CliMistakes, VersionNamesTheCliAndItsShimAndStatusTheJobsShim) {
  const Ran v = Cusnap({"--version"});
  EXPECT_EQ(v.status, 0);
  EXPECT_THAT(v.out, ::testing::StartsWith("cusnap "));
  EXPECT_THAT(v.out, HasSubstr(" commit "));
  EXPECT_THAT(v.out, HasSubstr("\nshim "));
  const std::string cli_line = v.out.substr(0, v.out.find('\n'));
  EXPECT_THAT(v.out, HasSubstr("libcusnap.so: " + cli_line)) << "the shim of the same build";

  const pid_t job = StartSleepJob();
  const Ran st = Cusnap({"status", "--pid", std::to_string(job)});
  EXPECT_THAT(st.out, HasSubstr("    shim: " + cli_line + "\n"));
  EXPECT_THAT(st.out, HasSubstr("0 tracked creates over its life (0 of them in host NUMA memory)"));
  const Ran js = Cusnap({"status", "--pid", std::to_string(job), "--json"});
  EXPECT_EQ(nlohmann::json::parse(js.out)["participants"][0]["shim"], cli_line);
}

TEST_F(CliMistakes, CompletionBashListsEveryCommandsOptionsAndParses) {
  const Ran r = Cusnap({"completion", "bash"});
  ASSERT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("run checkpoint restore dump recover status inspect demo completion"));
  EXPECT_THAT(r.out, HasSubstr("restore) opts=\"--help --images-dir --state-dir --device-map --json --pid-namespace --pid --all\""));
  EXPECT_THAT(r.out, HasSubstr("dump) opts=\"--help --pid --images-dir --leave-running --json\""));
  EXPECT_THAT(r.out, HasSubstr("status) opts=\"--help --json --prune --pid --all\""));
  EXPECT_THAT(r.out, HasSubstr("complete -o filenames -F _cusnap cusnap"));
  std::ofstream(dir_ + "/completion.bash") << r.out;
  EXPECT_EQ(RunCommand("bash -n " + dir_ + "/completion.bash", dir_).status, 0);
}


// ---- More kinds of mistake, each named ----

// A --device-map naming a device twice (two onto one target, or one source twice) is a wrong
// map, refused with the restore (exit 5, nothing changed), not a syntax error (exit 2); and a
// job whose checkpoint used no GPU is not told that the map's target is "also used".
TEST_F(CliMistakes, ADeviceMapNamingADeviceTwiceIsARestoreRefusalAndANoGpuJobUsesNone) {
  const pid_t job = StartSleepJob();
  const std::string state = dir_ + "/state";
  const std::string pid = std::to_string(job);
  ASSERT_EQ(Cusnap({"checkpoint", "--pid", pid, "--state-dir", state}).status, 0);
  struct Case {
    std::string map, says;
  };
  for (const Case& c : {Case{"0=1,1=1", "device map restores two devices onto device 1 (GPU-"},
                        Case{"0=1,0=0", "device map maps device 0 (GPU-"},
                        Case{"0=1", "device map is incomplete: it moves device 0 (GPU-"}}) {
    const Ran r = Cusnap({"restore", "--pid", pid, "--state-dir", state, "--device-map", c.map});
    EXPECT_EQ(r.status, kExitRestoreRefused) << c.map << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << c.map;
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed, the job stays checkpointed"))
        << c.map;
    EXPECT_THAT(r.err, Not(HasSubstr("which the checkpoint also uses"))) << c.map;
  }
  const Ran syntax = Cusnap({"restore", "--pid", pid, "--state-dir", state, "--device-map", "0=x"});
  EXPECT_EQ(syntax.status, kExitUsage);
  EXPECT_THAT(syntax.err, HasSubstr("'x' is neither a device ordinal nor a GPU UUID"));
  // An empty map (`--device-map "$MAP"` with MAP unset) is a usage error, not "no map": the
  // restore would otherwise stay on the old GPUs without a word. Same for recover.
  for (const char* command : {"restore", "recover"}) {
    const Ran empty = Cusnap({command, "--pid", pid, "--state-dir", state, "--device-map", ""});
    EXPECT_EQ(empty.status, kExitUsage) << command << ": " << empty.err;
    EXPECT_THAT(empty.err, HasSubstr("--device-map is empty: give OLD=NEW pairs, e.g. 0=1,1=0, "
                                     "or leave the option out")) << command;
  }
  const Ran st = Cusnap({"status", "--pid", pid, "--json"});
  EXPECT_EQ(nlohmann::json::parse(st.out)["participants"][0]["phase"], "released") << st.out;
  EXPECT_EQ(Cusnap({"restore", "--pid", pid, "--state-dir", state}).status, 0);
}

// A job process killed but not reaped (a zombie) has exited: its socket is stale for status
// and --prune, status does not fail because of it, and --pid names it as exited.
TEST_F(CliMistakes, AZombieJobIsNamedAsExitedAndItsSocketIsStale) {
  const pid_t live = StartSleepJob();
  const pid_t zombie = StartSleepJob();
  const std::string socket = Control() + "/" + std::to_string(zombie) + ".sock";
  ASSERT_EQ(::kill(zombie, SIGKILL), 0);  // not reaped: this test is its parent
  std::string state;
  for (int i = 0; i < 200 && state != "Z"; ++i) {
    std::ifstream in("/proc/" + std::to_string(zombie) + "/stat");
    std::string line;
    std::getline(in, line);
    state = line.substr(line.rfind(')') + 2, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(state, "Z");
  const std::string exited = "has exited (a zombie its parent, pid " +
                             std::to_string(::getpid()) + ", has not reaped)";
  const Ran st = Cusnap({"status"});
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_THAT(st.out, HasSubstr("stale endpoint " + socket + ": its process " + exited +
                                " (safe to remove)"));
  EXPECT_THAT(st.out, HasSubstr("pid " + std::to_string(live)));
  EXPECT_THAT(st.err, Not(HasSubstr("connection refused")));
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(zombie), "--state-dir", dir_ + "/s"});
  EXPECT_EQ(ck.status, kExitRefused);
  EXPECT_THAT(ck.err, HasSubstr("pid " + std::to_string(zombie) + " (sleep) " + exited));
  EXPECT_THAT(ck.err, Not(HasSubstr("cusnap run'")));
  const Ran pruned = Cusnap({"status", "--prune"});
  EXPECT_EQ(pruned.status, 0) << pruned.err;
  EXPECT_THAT(pruned.out, HasSubstr("stale endpoint " + socket + ": its process " + exited +
                                    " (removed)"));
  EXPECT_FALSE(fs::exists(socket));
}

// A job started with another control directory: its shim is loaded, so the message names the
// directory its environment gives and how to reach it, not "start it with 'cusnap run'".
TEST_F(CliMistakes, AJobOfAnotherControlDirectoryIsNamedWithThatDirectory) {
  const std::string other = dir_ + "/other";
  ::setenv("CUSNAP_CONTROL_DIR", other.c_str(), 1);
  const pid_t job = Spawn({Bin(), "run", "--", "sleep", "300"}, {});
  jobs_.push_back(job);
  ::setenv("CUSNAP_CONTROL_DIR", Control().c_str(), 1);
  const std::string socket = other + "/" + std::to_string(job) + ".sock";
  for (int i = 0; i < 600 && !fs::exists(socket); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(socket));
  const Ran r = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", dir_ + "/s"});
  EXPECT_EQ(r.status, kExitRefused);
  EXPECT_THAT(r.err, HasSubstr("has the cusnap shim loaded, and its environment puts its "
                               "endpoint in " + other + ", not in " + Control()));
  EXPECT_THAT(r.err, HasSubstr("run the command with CUSNAP_CONTROL_DIR=" + other));
  EXPECT_THAT(r.err, Not(HasSubstr("cusnap run'")));
  ::setenv("CUSNAP_CONTROL_DIR", other.c_str(), 1);
  const Ran ok = Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", dir_ + "/s"});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", dir_ + "/s"}).status, 0);
  ::setenv("CUSNAP_CONTROL_DIR", Control().c_str(), 1);
}

// The CLI's own usage errors: an unknown command named with the commands and the nearest one,
// a --pid that is not a number, and every usage error prefixed with its command.
TEST_F(CliMistakes, UsageErrorsNameTheCommandTheWordAndWhatAPidIs) {
  Ran r = Cusnap({"chekpoint", "--all"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cusnap: unknown command 'chekpoint'; the commands are: run, "
                               "checkpoint, restore, dump, recover, status, inspect, demo, completion; "
                               "did you mean 'checkpoint'?"));
  EXPECT_THAT(r.err, Not(HasSubstr("A subcommand is required")));
  r = Cusnap({"frobnicate"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'; the commands are: run,"));
  EXPECT_THAT(r.err, Not(HasSubstr("did you mean")));
  r = Cusnap({});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_EQ(r.err, "cusnap: a command is required; the commands are: run, checkpoint, restore, "
                   "dump, recover, status, inspect, demo, completion (cusnap --help says what "
                   "each does)\n");
  r = Cusnap({"status", "--pid", "abc"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cusnap status: --pid: 'abc' is not a number (a pid is a "
                               "positive integer)"));
  r = Cusnap({"checkpoint", "--pid", "0"});
  EXPECT_THAT(r.err, HasSubstr("cusnap checkpoint: --pid: '0' is not a pid"));
  r = Cusnap({"checkpoint"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cusnap checkpoint: Exactly 1 option from [--pid,--all] is required"));
  r = Cusnap({"completion"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("cusnap completion: shell is required"));
}

// Refusals end with the job's real state; a --state-dir that is a file is called a file.
TEST_F(CliMistakes, ARefusalsTailSaysTheJobsStateAndAFileIsNotCalledADirectory) {
  const pid_t job = StartSleepJob();
  const std::string pid = std::to_string(job), state = dir_ + "/state";
  const std::string file = dir_ + "/a-file";
  std::ofstream(file) << "x";
  Ran r = Cusnap({"checkpoint", "--pid", pid, "--state-dir", file});
  EXPECT_EQ(r.status, kExitRefused);
  EXPECT_THAT(r.err, HasSubstr("state directory " + file + " is a file: --state-dir takes a "
                               "directory"));
  EXPECT_THAT(r.err, Not(HasSubstr("changes no existing directory's mode")));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed, the job keeps running"));
  ASSERT_EQ(Cusnap({"checkpoint", "--pid", pid, "--state-dir", state}).status, 0);
  r = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state});
  EXPECT_EQ(r.status, kExitRefused);
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed, the job stays checkpointed"));
  EXPECT_THAT(r.err, Not(HasSubstr("keeps running")));
  EXPECT_EQ(Cusnap({"restore", "--pid", pid, "--state-dir", state}).status, 0);
}

// inspect takes the state directory or the state file itself, and $CUSNAP_STATE_DIR when
// neither is given, as checkpoint and restore do.
TEST_F(CliMistakes, InspectTakesTheStateFileOrFallsBackToCusnapStateDir) {
  const pid_t job = StartSleepJob();
  const std::string state = dir_ + "/state";
  ASSERT_EQ(Cusnap({"checkpoint", "--pid", std::to_string(job), "--state-dir", state}).status, 0);
  Ran r = Cusnap({"inspect", state + "/cusnap-state.json"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("state file: " + state + "/cusnap-state.json\n"));
  EXPECT_THAT(r.err, Not(HasSubstr("Not a directory")));
  ::setenv("CUSNAP_STATE_DIR", state.c_str(), 1);
  r = Cusnap({"inspect"});
  ::unsetenv("CUSNAP_STATE_DIR");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("state file: " + state + "/cusnap-state.json\n"));
  EXPECT_THAT(r.out, HasSubstr("1 participant\n"));
  EXPECT_EQ(Cusnap({"restore", "--pid", std::to_string(job), "--state-dir", state}).status, 0);
}

// Completion offers the shells after `completion`, directories after --state-dir and after
// `inspect`.
TEST_F(CliMistakes, CompletionOffersShellsAndDirectories) {
  const Ran script = Cusnap({"completion", "bash"});
  ASSERT_EQ(script.status, 0);
  std::ofstream(dir_ + "/completion.bash") << script.out;
  fs::create_directories(dir_ + "/tree/states");
  std::ofstream(dir_ + "/tree/stray.txt") << "x";
  auto complete = [&](const std::string& words, int cword) {
    return RunCommand("cd " + dir_ + "/tree && bash -c 'source " + dir_ +
                          "/completion.bash; COMP_WORDS=(" + words + "); COMP_CWORD=" +
                          std::to_string(cword) + "; _cusnap; echo \"${COMPREPLY[*]}\"'",
                      dir_).out;
  };
  EXPECT_EQ(complete("cusnap completion \"\"", 2), "bash zsh fish --help\n");
  EXPECT_EQ(complete("cusnap checkpoint --state-dir \"\"", 3), "states\n");
  EXPECT_EQ(complete("cusnap inspect \"\"", 2), "states\n");
}

// `cusnap run` exits with the job's status (127 for a missing program), and says so in --help.
TEST_F(CliMistakes, RunExitsWithTheJobsStatusAndItsHelpSaysSo) {
  EXPECT_EQ(Cusnap({"run", "--", dir_ + "/no-such-program"}).status, 127);
  EXPECT_EQ(Cusnap({"run", "--", "sh", "-c", "exit 7"}).status, 7);
  const Ran help = Cusnap({"run", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("Exit status: the command's own (it replaces cusnap: 127 when "
                                  "the program is not found"));
}

}  // namespace
}  // namespace cusnap::testing
