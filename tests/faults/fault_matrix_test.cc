// The fault matrix: for every phase of `cusnap checkpoint`,
// `cusnap restore`, `cusnap dump` and `cusnap restore --images-dir` (these two when CRIU runs
// here, else skipped with the reason), SIGINT and SIGKILL of the CLI, SIGKILL of each participant, and an
// injected error in each driver call the phase makes (in each participant, and in the CLI);
// afterwards `status` must name the state and one command bring the job back with every byte
// intact (for a dead participant: every byte the survivors created, its own memory named;
// for a dump: the job runs on in place, or its images are complete and `restore
// --images-dir` brings it back).
//
// FaultMatrix.EveryCase enumerates the cases from a clean run (the phases the CLI pauses at,
// src/cli/test_pause.h; the driver calls each process makes in each, SIMCUDA_CALL_LOG), runs
// each one in a child process of this program (FaultMatrix.OneCase, a fresh job each) on a
// pool of CUSNAP_FAULT_JOBS (default: twice the CPU count, at least 2) within a budget of
// CUSNAP_FAULT_BUDGET_S seconds (default 480), and prints
//   FAULT MATRIX: <cases> cases, <bytes lost> bytes lost, <stuck> processes stuck, <failed> failed
// then each failing case with what went wrong. CUSNAP_FAULT_FILTER=<text> runs only the cases
// whose line contains it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "cli_runner.h"
#include "criu_problem.h"
#include "fault_job.h"

namespace faults {
namespace {

/// A case that runs longer than this is killed and counted as failed (stuck), ms.
constexpr int kCaseMs = 150'000;

/// Kinds of case still open (tests/faults/known_open.txt: one line per kind, "<text the case
/// line contains> | <why, and the issue>"; '#' starts a comment). A failing case of such a
/// kind is printed and counted as OPEN instead of FAILED, and its bytes and stuck processes are
/// reported apart: the matrix's assertions cover every other case. An open case that passes
/// is reported, so that the list only shrinks.
std::vector<std::pair<std::string, std::string>> KnownOpen() {
  std::vector<std::pair<std::string, std::string>> kinds;
  std::ifstream in(CUSNAP_FAULT_KNOWN_OPEN);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t bar = line.find(" | ");
    if (bar == std::string::npos) continue;
    kinds.emplace_back(line.substr(0, bar), line.substr(bar + 3));
  }
  return kinds;
}

/// The reason a known open kind gives for `text`, or "" when it is none of them.
std::string OpenReason(const std::vector<std::pair<std::string, std::string>>& kinds,
                       const std::string& text) {
  for (const auto& [match, why] : kinds) {
    if (text.find(match) != std::string::npos) return why;
  }
  return "";
}

/// A number from the environment, or `fallback`.
long EnvNumber(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

/// The verdict a case's child wrote (FaultMatrix.OneCase), or one problem saying why none.
Verdict ReadVerdict(const std::string& path, const std::string& log, int wait_status) {
  Verdict v;
  std::ifstream in(path);
  bool any = false;
  for (std::string line; std::getline(in, line);) {
    any = true;
    std::istringstream words(line);
    std::string key;
    words >> key;
    std::string rest;
    std::getline(words, rest);
    if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    if (key == "lost") v.bytes_lost = std::stoull(rest);
    if (key == "stuck") v.stuck = static_cast<unsigned>(std::stoul(rest));
    if (key == "recovery") v.recovery = rest;
    if (key == "problem") v.problems.push_back(rest);
  }
  if (!any) {
    std::ifstream l(log);
    std::string text((std::istreambuf_iterator<char>(l)), std::istreambuf_iterator<char>());
    v.problems.push_back("no verdict (wait status " + std::to_string(wait_status) + "); log " +
                         log + ": ..." + text.substr(text.size() > 600 ? text.size() - 600 : 0));
  } else if (wait_status != 0 && v.problems.empty()) {
    v.problems.push_back("the case's test failed (wait status " + std::to_string(wait_status) +
                         "); log " + log);
  }
  return v;
}

class FaultMatrix : public FaultJob {};

/// One case, when the matrix's driver started us for it (CUSNAP_FAULT_CASE, CUSNAP_FAULT_RESULT).
TEST_F(FaultMatrix, OneCase) {
  const std::string text = cusnap::testing::Env("CUSNAP_FAULT_CASE");
  if (text.empty()) GTEST_SKIP() << "run by FaultMatrix.EveryCase";
  // A group of our own, with the job's workers in it: the driver ends them all together.
  ::setpgid(0, 0);
  const auto c = Case::Parse(text);
  ASSERT_TRUE(c.has_value()) << text;
  if (c->command == "dump" || c->command == "restore-images") {
    ASSERT_EQ(cusnap::testing::CriuProblem(), "");
    // Its processes cannot be asked at a pause (no command channel): a driver fault is
    // armed by call number from their start.
    const bool armed = c->kind == Kind::kDriverError && c->process != "cli";
    ASSERT_NO_FATAL_FAILURE(BuildImagesJob(
        "", armed ? c->process + ":" + c->entry + ":" + std::to_string(c->nth) + ":" +
                        std::to_string(kInjectedResult)
                  : ""));
  } else {
    ASSERT_NO_FATAL_FAILURE(BuildJob());
  }
  const Verdict v = RunCase(*c);
  std::ofstream out(cusnap::testing::Env("CUSNAP_FAULT_RESULT"));
  out << "lost " << v.bytes_lost << "\nstuck " << v.stuck << "\nrecovery " << v.recovery << "\n";
  for (const auto& p : v.problems) out << "problem " << p << "\n";
  out.close();
  EXPECT_TRUE(v.problems.empty()) << text;
}

TEST_F(FaultMatrix, EveryCase) {
  const auto started = std::chrono::steady_clock::now();
  // Enumerate: a clean checkpoint and restore, paused at every boundary, calls logged.
  const std::string call_log = dir_ + "/calls";
  std::filesystem::create_directory(call_log);
  ASSERT_NO_FATAL_FAILURE(BuildJob(call_log));
  std::map<std::string, CommandPlan> plans;
  plans["checkpoint"] = RecordPlan("checkpoint", call_log);
  plans["restore"] = RecordPlan("restore", call_log);
  ASSERT_FALSE(HasFailure()) << "the clean cycle failed: no cases";
  ASSERT_NO_FATAL_FAILURE(CheckEveryByte());
  for (jobtest::Worker* w : Live()) Kill(*w);
  // Dump and restore --images-dir, on the images job, when CRIU runs here.
#if defined(__SANITIZE_ADDRESS__)
  const std::string no_criu = "the images job runs on the release build, not under AddressSanitizer";
#else
  const std::string no_criu = cusnap::testing::CriuProblem();
#endif
  if (no_criu.empty()) {
    ASSERT_NO_FATAL_FAILURE(BuildImagesJob(call_log));
    plans["dump"] = RecordPlan("dump", call_log);
    plans["restore-images"] = RecordPlan("restore-images", call_log);
    ASSERT_FALSE(HasFailure()) << "the clean dump and restore failed: no cases";
    Verdict clean;
    JudgeImagesJob(clean, "", -1);
    ASSERT_TRUE(clean.problems.empty()) << "the clean dump and restore lost the job: "
                                        << clean.problems.front();
  } else {
    std::printf("FAULT MATRIX: dump and restore --images-dir cases skipped: CRIU cannot run "
                "here: %s\n", no_criu.c_str());
  }
  std::vector<Case> cases = Enumerate(plans);
  const std::string filter = cusnap::testing::Env("CUSNAP_FAULT_FILTER");
  if (!filter.empty()) {
    std::erase_if(cases, [&](const Case& c) { return c.Text().find(filter) == std::string::npos; });
  }
  for (const auto& [command, plan] : plans) {
    std::string line;
    for (const auto& p : plan.phases) line += " " + p;
    std::printf("%s phases:%s\n", command.c_str(), line.c_str());
  }
  std::map<std::string, unsigned> by_kind;  // "<kind> <command>" -> cases
  for (const auto& c : cases) {
    const std::string text = c.Text();
    ++by_kind[text.substr(0, text.find(' ', text.find(' ') + 1))];
  }
  for (const auto& [kind, n] : by_kind) std::printf("cases %s: %u\n", kind.c_str(), n);
  std::fflush(stdout);

  // Run them, each in a child of this program, a pool at a time.
  // Cases mostly wait (for a process to stop, a command to end, a bound): two per CPU.
  const long jobs = EnvNumber(
      "CUSNAP_FAULT_JOBS", std::max(2L, 2L * static_cast<long>(std::thread::hardware_concurrency())));
  const auto budget = std::chrono::seconds(EnvNumber("CUSNAP_FAULT_BUDGET_S", 480));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string out_dir = dir_ + "/cases";
  std::filesystem::create_directory(out_dir);
  struct Running {
    size_t index;
    std::chrono::steady_clock::time_point since;
  };
  std::map<pid_t, Running> running;
  std::vector<Verdict> verdicts(cases.size());
  std::vector<double> seconds_of(cases.size(), 0);  // each case's wall time
  size_t next = 0;
  while (next < cases.size() || !running.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (next < cases.size() && static_cast<long>(running.size()) < jobs) {
      if (now - started > budget) {
        verdicts[next++].problems.push_back("not run: the matrix's budget was spent");
        continue;
      }
      const std::string base = out_dir + "/" + std::to_string(next);
      const int log = ::open((base + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ::setenv("CUSNAP_FAULT_CASE", cases[next].Text().c_str(), 1);
      ::setenv("CUSNAP_FAULT_RESULT", (base + ".verdict").c_str(), 1);
      const pid_t pid = cusnap::testing::Spawn({self, "--gtest_filter=FaultMatrix.OneCase"},
                                               {{log, 1}, {log, 2}});
      ::unsetenv("CUSNAP_FAULT_CASE");
      ::unsetenv("CUSNAP_FAULT_RESULT");
      ::close(log);
      if (pid <= 0) {
        verdicts[next++].problems.push_back("could not start the case's process");
        continue;
      }
      running[pid] = Running{next++, now};
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t done = ::waitpid(it->first, &status, WNOHANG);
      if (done == 0 && std::chrono::steady_clock::now() - it->second.since >
                           std::chrono::milliseconds(kCaseMs)) {
        ::kill(-it->first, SIGKILL);  // its process group: the case and its job's workers
        ::kill(it->first, SIGKILL);
        ::waitpid(it->first, &status, 0);
        Verdict& v = verdicts[it->second.index];
        v.stuck += 1;
        v.problems.push_back("the case did not end within " + std::to_string(kCaseMs / 1000) + " s");
        it = running.erase(it);
        continue;
      }
      if (done == 0) {
        ++it;
        continue;
      }
      seconds_of[it->second.index] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second.since).count();
      ::kill(-it->first, SIGKILL);  // anything of its job left behind
      const std::string base = out_dir + "/" + std::to_string(it->second.index);
      Verdict& v = verdicts[it->second.index];
      const Verdict read = ReadVerdict(base + ".verdict", base + ".log", status);
      v.bytes_lost += read.bytes_lost;
      v.stuck += read.stuck;
      v.recovery = read.recovery;
      v.problems.insert(v.problems.end(), read.problems.begin(), read.problems.end());
      it = running.erase(it);
    }
  }

  // The figures, then what went wrong in each failing case.
  const auto known_open = KnownOpen();
  unsigned long long lost = 0, open_lost = 0;
  unsigned long stuck = 0, failed = 0, open = 0, open_stuck = 0, open_passed = 0;
  std::map<std::string, unsigned> failed_by_kind;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string why = OpenReason(known_open, cases[i].Text());
    if (!why.empty()) {
      if (verdicts[i].problems.empty()) {
        ++open_passed;
        std::printf("OPEN KIND PASSED %s (remove it from known_open.txt)\n", cases[i].Text().c_str());
        continue;
      }
      ++open;
      open_lost += verdicts[i].bytes_lost;
      open_stuck += verdicts[i].stuck;
      std::printf("OPEN %s (%s):", cases[i].Text().c_str(), why.c_str());
      for (const auto& p : verdicts[i].problems) std::printf(" [%s]", p.c_str());
      std::printf("\n");
      continue;
    }
    lost += verdicts[i].bytes_lost;
    stuck += verdicts[i].stuck;
    if (verdicts[i].problems.empty()) continue;
    ++failed;
    ++failed_by_kind[cases[i].Text().substr(0, cases[i].Text().find(' '))];
    std::printf("FAILED %s:", cases[i].Text().c_str());
    for (const auto& p : verdicts[i].problems) std::printf(" [%s]", p.c_str());
    std::printf("\n");
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::steady_clock::now() - started).count();
  for (const auto& [kind, n] : failed_by_kind) std::printf("failed %s: %u\n", kind.c_str(), n);
  if (!cases.empty()) {  // where the budget goes
    const size_t slowest = static_cast<size_t>(
        std::max_element(seconds_of.begin(), seconds_of.end()) - seconds_of.begin());
    std::printf("slowest case: %s (%.1f s)\n", cases[slowest].Text().c_str(), seconds_of[slowest]);
  }
  std::printf("FAULT MATRIX: %zu cases, %llu bytes lost, %lu processes stuck, %lu failed "
              "(%lld s, %ld at a time)\n",
              cases.size(), lost, stuck, failed, static_cast<long long>(seconds), jobs);
  std::printf("FAULT MATRIX OPEN KINDS: %lu cases open (%llu bytes lost, %lu processes stuck "
              "among them), %lu open cases passed\n",
              open, open_lost, open_stuck, open_passed);
  std::fflush(stdout);
  EXPECT_EQ(lost, 0u);
  EXPECT_EQ(stuck, 0u);
  EXPECT_EQ(failed, 0u);
}

}  // namespace
}  // namespace faults
