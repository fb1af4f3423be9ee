// The fault matrix's job and one case's run (fault_job.h).
#include "fault_job.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "coordinator/proc/processes.h"
#include "criu_problem.h"

namespace faults {
namespace {

using jobtest::Ran;
using jobtest::Worker;

constexpr const char* kPauseMark = "cusnap-test-pause: ";

/// The lines of `path` (a call log; missing: none).
std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// The last line of `text` that is not empty, for a problem's message.
std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "(nothing printed)";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end - (start == std::string::npos ? 0 : start + 1) + 1);
}

/// What a failed command said: its stderr lines, notes left out, joined (a recovery's last
/// line alone only says that it failed).
std::string Said(const std::string& err) {
  std::istringstream in(err);
  std::string said;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.find(": note: ") != std::string::npos) continue;
    said += (said.empty() ? "" : " | ") + line;
  }
  return said.empty() ? "(nothing printed)" : said;
}

/// pid -> phase, as `cusnap status --all --json` printed them.
std::map<int, std::string> PhasesByPid(const std::string& json) {
  std::map<int, std::string> phases;
  const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("participants") || !doc["participants"].is_array()) {
    return phases;
  }
  for (const auto& p : doc["participants"]) phases[p.value("pid", 0)] = p.value("phase", "?");
  return phases;
}

/// The pids the state file in `state_dir` records (none when it cannot be read).
std::set<int> RecordedPids(const std::string& state_dir) {
  std::set<int> pids;
  std::ifstream in(state_dir + "/cusnap-state.json");
  const auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("participants") || !doc["participants"].is_array()) {
    return pids;
  }
  for (const auto& p : doc["participants"]) pids.insert(p.value("pid", 0));
  return pids;
}

/// The name the CLI prints in its pause lines for `command` (restore-images is `restore`).
std::string CliName(const std::string& command) {
  return command == "restore-images" ? "restore" : command;
}

/// The text of the file at `path` ("" when missing).
std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// True when `pid` exists and is not a zombie.
bool Running(pid_t pid) { return !cusnap::coord::ProcessExited(pid); }

/// The images job's verdict lines in `log` for `role`: "PASS", "FAIL <why>" (the last word
/// it says), and the allocations it lost with why.
struct ImagesJobSays {
  std::string final;                   ///< "" while it has said neither PASS nor FAIL
  std::map<int, std::string> lost;     ///< allocation -> why
};
ImagesJobSays Says(const std::string& log, const std::string& role) {
  ImagesJobSays says;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word, who;
    words >> word >> who;
    if (who != role) continue;
    std::string rest;
    std::getline(words, rest);
    if (word == "PASS" || word == "FAIL") says.final = word + rest;
    if (word == "LOST") {
      int allocation = 0;
      std::istringstream r(rest);
      r >> allocation;
      std::getline(r, says.lost[allocation]);
    }
  }
  return says;
}

/// The images job's allocations (criu_job.cc): number -> creator, and its size.
const std::map<int, std::string> kImagesCreator = {{1, "root"}, {2, "child"}};
constexpr unsigned long long kImagesJobMiB = 2;

}  // namespace

void FaultJob::TearDown() {
  // A case may leave survivors held at their gate: "exit" would wait for them.
  for (Worker* w : Live()) Kill(*w);
  // The images job's processes are not all our children (CRIU brings them back where it
  // likes): each one still running under its recorded pid is killed, then reaped if ours.
  for (const auto& [name, pid] : images_pids_) {
    if (Running(pid) && ReadText("/proc/" + std::to_string(pid) + "/cmdline").find("criu_job") !=
                            std::string::npos) {
      ::kill(pid, SIGCONT);
      ::kill(pid, SIGKILL);
    }
    ::waitpid(pid, nullptr, 0);
  }
  JobTest::TearDown();
}

void FaultJob::BuildImagesJob(const std::string& call_log, const std::string& fault) {
  images_job_dir_ = dir_ + "/job";
  images_log_ = dir_ + "/job.log";
  state_dir_ = dir_ + "/images";
  std::filesystem::create_directory(images_job_dir_);
  // The job's processes come back from CRIU as orphans, and the child is orphaned when CRIU
  // kills the root: as their subreaper we reap them, so their pids are free for the restore.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // The real hold (stopped while checkpointed), as a user's dump has it.
  ::unsetenv("CUSNAP_HOLD");
  cusnap::testing::KeepInheritedDescriptorsFromChildren();
  const int out = ::open(images_log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(out, 0);
  ASSERT_GE(in, 0);
  std::vector<std::string> args = {"/usr/bin/env"};
  if (!call_log.empty()) args.push_back("SIMCUDA_CALL_LOG=" + call_log);
  if (!fault.empty()) args.push_back("CRIU_JOB_FAULT=" + fault);
  const std::string bin = cusnap::testing::Env("CUSNAP_TEST_BIN_DIR");
  args.insert(args.end(), {bin + "/cusnap", "run", "--", bin + "/criu_job", images_job_dir_,
                           std::to_string(kImagesJobMiB)});
  const pid_t root = cusnap::testing::Spawn(args, {{in, 0}, {out, 1}, {out, 2}});
  ::close(out);
  ::close(in);
  ASSERT_GT(root, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(jobtest::kWaitMs);
  std::string log;
  while (std::chrono::steady_clock::now() < deadline) {
    log = ReadText(images_log_);
    if (log.find("READY root") != std::string::npos && log.find("READY child") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string word, role;
    int pid = 0;
    if (words >> word >> role >> pid && word == "PID") images_pids_[role] = pid;
  }
  ASSERT_EQ(images_pids_.size(), 2u) << "criu_job did not start: " << log;
  ASSERT_EQ(images_pids_["root"], root) << "`cusnap run` execs its program";
  ASSERT_NE(log.find("READY child"), std::string::npos) << log;
}

std::vector<std::string> FaultJob::CliArgs(const std::string& command) const {
  if (command == "dump") {
    return {"dump", "--pid", std::to_string(images_pids_.at("root")), "--images-dir", state_dir_};
  }
  if (command == "restore-images") return {"restore", "--images-dir", state_dir_};
  std::vector<std::string> args = {command};
  args.insert(args.end(), target_.begin(), target_.end());
  args.insert(args.end(), {"--state-dir", state_dir_});
  return args;
}

std::map<std::string, pid_t> FaultJob::JobPids() const {
  if (!images_pids_.empty()) return images_pids_;
  std::map<std::string, pid_t> pids;
  for (const auto& [name, w] : by_name_) pids[name] = w->pid;
  return pids;
}

std::map<std::string, pid_t> FaultJob::LiveImagesJob() {
  std::map<std::string, pid_t> live;
  for (const auto& [name, pid] : images_pids_) {
    ::waitpid(pid, nullptr, WNOHANG);
    if (Running(pid)) live[name] = pid;
  }
  return live;
}

void FaultJob::BuildJob(const std::string& call_log) {
  state_dir_ = dir_ + "/state";
  if (!call_log.empty()) ::setenv("SIMCUDA_CALL_LOG", call_log.c_str(), 1);
  Worker& a = Start("A", 0);
  Worker& b = Start("B", 1);
  Worker& c = Start("C", 0);
  ::unsetenv("SIMCUDA_CALL_LOG");
  by_name_ = {{"A", &a}, {"B", &b}, {"C", &c}};
  using jobtest::OkValue;
  creator_ = {{"a", "A"}, {"b", "B"}, {"c", "C"}};
  ASSERT_NO_FATAL_FAILURE(CreateFilled(a, "a", 2, "dev", 0, "a_in_A", "0,1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(a, "a", b, "a_in_B", 2, "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(a, "a", c, "a_in_C", 2, "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(b, "b", 2, "dev", 1, "b_in_B", "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(b, "b", a, "b_in_A", 2, "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(c, "c", 2, "host", 0, "c_in_C", "0"));
  // A multicast team of A (device 0, member a) and B (device 1, member b), mapped in A.
  ASSERT_NO_FATAL_FAILURE(MulticastTeam(a, b, "m", "a", "b"));
  ASSERT_EQ(OkValue(Ask(a, "map m_in_A m 0 2 0")).rfind("0x", 0), 0u);
}

Ran FaultJob::RunPaused(const std::string& command, const std::string& pause,
                        const std::map<std::string, std::string>& env,
                        const std::function<void(pid_t, const std::string&)>& at) {
  const std::vector<std::string> args = CliArgs(command);
  std::map<std::string, std::string> cli_env = env;
  if (!pause.empty()) cli_env["CUSNAP_TEST_PAUSE_AT"] = pause;
  // Spawn copies the environment: set for the CLI only, gone again before anything else runs.
  for (const auto& [name, value] : cli_env) ::setenv(name.c_str(), value.c_str(), 1);
  size_t scanned = 0;  // stderr up to here holds no pause line not yet handled
  const Ran r = CusnapWatched(args, [&](pid_t pid, const Ran& so_far) {
    for (size_t end; (end = so_far.err.find('\n', scanned)) != std::string::npos;
         scanned = end + 1) {
      const std::string line = so_far.err.substr(scanned, end - scanned);
      if (line.rfind(kPauseMark, 0) != 0) continue;
      // Wait until it has stopped (WNOWAIT: an exit instead stays for the harness to reap).
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WEXITED | WNOWAIT) < 0 &&
             errno == EINTR) {
      }
      if (info.si_code != CLD_STOPPED) return;
      // "<command>:<phase>:<when>" -> "<phase>:<when>"
      const std::string where =
          line.substr(std::string(kPauseMark).size() + CliName(command).size() + 1);
      at(pid, where);
    }
  });
  for (const auto& [name, value] : cli_env) ::unsetenv(name.c_str());
  return r;
}

CommandPlan FaultJob::RecordPlan(const std::string& command, const std::string& call_log) {
  struct Mark {
    std::string phase, when;
    std::map<std::string, size_t> lines;  // process -> calls logged so far
    bool job = true;                      // the job's processes existed
  };
  std::vector<Mark> marks;
  std::map<std::string, pid_t> pids = JobPids();
  CommandPlan plan;
  for (const auto& [name, pid] : pids) plan.workers.push_back(name);
  if (!images_pids_.empty()) {
    for (const auto& [name, pid] : pids) plan.counted.insert(name);
  }
  const auto log_of = [&](pid_t pid) { return call_log + "/" + std::to_string(pid) + ".calls"; };
  const Ran r = RunPaused(command, CliName(command) + ":*:*", {{"SIMCUDA_CALL_LOG", call_log}},
                          [&](pid_t cli, const std::string& where) {
                            Mark m;
                            m.phase = where.substr(0, where.rfind(':'));
                            m.when = where.substr(where.rfind(':') + 1);
                            for (const auto& [name, pid] : pids) {
                              m.job = m.job && Running(pid);
                              m.lines[name] = Lines(log_of(pid)).size();
                            }
                            m.lines["cli"] = Lines(log_of(cli)).size();
                            pids["cli"] = cli;
                            marks.push_back(std::move(m));
                            ::kill(cli, SIGCONT);
                          });
  EXPECT_EQ(r.status, 0) << "the clean " << command << " of the enumeration failed:\n"
                         << r.out << r.err;
  // Our zombies (the images job's root once CRIU killed it) free their pids for a restore.
  if (!images_pids_.empty()) LiveImagesJob();
  std::map<std::string, std::vector<std::string>> logs;
  for (const auto& [name, pid] : pids) logs[name] = Lines(log_of(pid));
  for (const Mark& m : marks) {
    if (!m.job) plan.without_job.insert(m.phase + ":" + m.when);
  }
  for (size_t k = 0; k < marks.size(); ++k) {
    if (marks[k].when != "before") continue;
    const auto after = std::find_if(marks.begin() + static_cast<long>(k), marks.end(),
                                    [&](const Mark& m) { return m.when == "after" && m.phase == marks[k].phase; });
    if (after == marks.end()) continue;
    plan.phases.push_back(marks[k].phase);
    for (const auto& [name, lines] : logs) {
      const size_t from = marks[k].lines[name];
      const size_t to = std::min(after->lines.at(name), lines.size());
      auto& entries = plan.calls[{marks[k].phase, name}];
      for (size_t i = from; i < to; ++i) {
        if (entries.contains(lines[i])) continue;
        entries[lines[i]] = static_cast<unsigned>(
            std::count(lines.begin(), lines.begin() + static_cast<long>(from), lines[i]));
      }
    }
  }
  return plan;
}

std::string FaultJob::RecoverInPlace(Verdict& v, const std::map<std::string, pid_t>& live,
                                     pid_t killed_pid) {
  // `status` must name the state of every survivor.
  const Ran st = Cusnap({"status", "--all", "--json"});
  const auto phases = PhasesByPid(st.out);
  std::set<std::string> seen;
  for (const auto& [name, pid] : live) {
    const auto it = phases.find(pid);
    if (it == phases.end()) {
      v.problems.push_back("status does not name " + name + " (pid " + std::to_string(pid) +
                           "): exit " + std::to_string(st.status) + " " + LastLine(st.err));
    } else {
      seen.insert(it->second);
    }
  }

  // One command brings it back.
  Ran rec;
  if (seen.size() == 1 && *seen.begin() == "active") {
    v.recovery = "";
  } else if (seen.size() == 1 && *seen.begin() == "released" &&
             !RecordedPids(state_dir_).contains(killed_pid)) {
    // Checkpointed, every process of the checkpoint alive (one that died before the
    // checkpoint began is not in its state file).
    v.recovery = "restore";
    // The images job's restored processes are not our descendants: --all finds them.
    rec = images_pids_.empty() ? Restore(state_dir_)
                               : Cusnap({"restore", "--all", "--state-dir", state_dir_});
  } else {
    v.recovery = "recover --all";
    rec = Cusnap({"recover", "--all", "--state-dir", state_dir_});
  }
  if (!v.recovery.empty() && rec.status != 0) {
    std::string states;
    for (const auto& s : seen) states += (states.empty() ? "" : ",") + s;
    v.problems.push_back("after the fault the job was " + states + "; 'cusnap " + v.recovery +
                         "' exited " + std::to_string(rec.status) + ": " + Said(rec.err));
  }
  if (v.recovery.empty()) {
    const Ran after = Cusnap({"status", "--all"});
    rec.out = after.out;
    rec.err = after.err;
  }
  ExpectActive(v, live);
  return rec.out + rec.err;
}

void FaultJob::ExpectActive(Verdict& v, const std::map<std::string, pid_t>& live) {
  const auto phases = PhasesByPid(Cusnap({"status", "--all", "--json"}).out);
  for (const auto& [name, pid] : live) {
    const auto it = phases.find(pid);
    const std::string phase = it == phases.end() ? "(not listed)" : it->second;
    if (phase != "active") {
      v.problems.push_back("after recovery " + name + " (pid " + std::to_string(pid) + ") is " +
                           phase);
    }
  }
}

Verdict FaultJob::RunCase(const Case& c) {
  Verdict v;
  const bool images = !images_pids_.empty();
  if (c.command == "restore" || c.command == "restore-images") {
    const Ran first = images ? Cusnap(CliArgs("dump")) : Checkpoint(state_dir_);
    if (first.status != 0) {
      v.problems.push_back(std::string("the clean ") + (images ? "dump" : "checkpoint") +
                           " before the restore exited " + std::to_string(first.status) + ": " +
                           LastLine(first.err));
      return v;
    }
    if (images) LiveImagesJob();  // our zombies free their pids for CRIU
  }
  std::map<std::string, std::string> env;
  const std::string pause = CliName(c.command) + ":" + c.phase + ":" + c.when;
  bool reached = false;
  std::string killed;
  pid_t killed_pid = -1;
  if (c.kind == Kind::kDriverError && c.process == "cli") {
    // The CLI's own calls (the native checkpoint API) are counted from its start.
    env["SIMCUDA_FAULTS"] = c.entry + ":" + std::to_string(c.nth) + ":" + std::to_string(kInjectedResult);
  }
  const Ran run = RunPaused(c.command, pause, env, [&](pid_t cli, const std::string&) {
    reached = true;
    switch (c.kind) {
      case Kind::kCliSigint:
        ::kill(cli, SIGINT);
        ::kill(cli, SIGCONT);
        break;
      case Kind::kCliSigkill:
        ::kill(cli, SIGKILL);
        break;
      case Kind::kKillParticipant:
        killed = c.process;
        if (images) {
          // Not necessarily our child (CRIU restores it under the root): it is not reaped
          // here, so its death is waited for until /proc shows it, as Kill's reaping does.
          killed_pid = images_pids_.at(c.process);
          ::kill(killed_pid, SIGKILL);
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerMs);
          while (Running(killed_pid) && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        } else {
          // A restore that falls back to recover pauses at read_state twice: the second
          // pause finds the participant dead already (pid -1) and keeps the first's pid.
          if (by_name_.at(c.process)->pid > 0) killed_pid = by_name_.at(c.process)->pid;
          Kill(*by_name_.at(c.process));
        }
        ::kill(cli, SIGCONT);
        break;
      case Kind::kDriverError:
        // The images job's processes were started with the fault armed (SIMCUDA_FAULTS).
        if (c.process != "cli" && !images) {
          const std::string reply = Ask(*by_name_.at(c.process),
                                        "inject " + c.entry + " " + std::to_string(kInjectedResult),
                                        kAnswerMs);
          if (reply != "ok") v.problems.push_back("worker " + c.process + " did not arm the fault: " + reply);
        }
        ::kill(cli, SIGCONT);
        break;
    }
  });
  if (!reached) {
    v.problems.push_back("cusnap " + c.command + " never paused at " + pause + " (exit " +
                         std::to_string(run.status) + ": " + LastLine(run.err) + ")");
  }
  if (run.status < 0 && c.kind != Kind::kCliSigkill) {
    ++v.stuck;
    v.problems.push_back("cusnap " + c.command + " did not finish after the fault");
  }
  // An interrupted command stops and exits 128+SIGINT, or finishes (0, or 4 when what it
  // finished failed); a refusal's exit (3, 5) would say a check refused it (README, exit
  // codes: a dump interrupted after `save` must not exit 3).
  if (c.kind == Kind::kCliSigint && (run.status == 3 || run.status == 5)) {
    v.problems.push_back("cusnap " + c.command + " exited " + std::to_string(run.status) +
                         " after SIGINT, not 130: " + LastLine(run.err));
  }
  if (images) {
    JudgeImagesJob(v, killed, killed_pid);
    return v;
  }

  std::map<std::string, pid_t> survivors;
  for (Worker* w : Live()) survivors[w->name] = w->pid;
  const std::string said = RecoverInPlace(v, survivors, killed_pid);
  const bool survivors_import_from_dead = std::any_of(views_.begin(), views_.end(), [&](const auto& view) {
    return !killed.empty() && view.worker->pid > 0 && creator_.at(view.allocation) == killed;
  });
  if (survivors_import_from_dead && said.find(std::to_string(killed_pid)) == std::string::npos) {
    // Memory whose creator died (its importers survive) is named, not silently dropped: by
    // the recovery command, or by `status` when none was needed.
    v.problems.push_back("the memory of " + killed + " (pid " + std::to_string(killed_pid) +
                         "), which died, is not named by " +
                         (v.recovery.empty() ? std::string("status") : "'cusnap " + v.recovery + "'"));
  }

  // Every byte a survivor created reads back in every survivor; an answer must come. Each
  // survivor is asked on a thread of its own, so that stuck ones cost one bound in all.
  std::vector<Worker*> live = Live();
  std::vector<std::vector<std::string>> found(live.size());
  std::vector<unsigned long long> lost(live.size(), 0);
  std::vector<char> stuck(live.size(), 0);
  std::vector<std::thread> readers;
  for (size_t k = 0; k < live.size(); ++k) {
    readers.emplace_back([&, k] {
      Worker* w = live[k];
      for (const auto& view : views_) {
        if (view.worker != w) continue;
        const std::string reply = Ask(
            *w, "check " + view.view + " " + std::to_string(seeds_.at(view.allocation)), kAnswerMs);
        if (reply == "<timeout>") {
          stuck[k] = 1;
          found[k].push_back(w->name + " did not answer a read of " + view.view + " within " +
                             std::to_string(kAnswerMs) + " ms");
          return;
        }
        if (reply == "ok" || creator_.at(view.allocation) == killed) continue;
        lost[k] += view.mib << 20;
        found[k].push_back(w->name + " view " + view.view + " of " + view.allocation + ": " + reply);
      }
    });
  }
  for (auto& t : readers) t.join();
  for (size_t k = 0; k < live.size(); ++k) {
    v.bytes_lost += lost[k];
    v.stuck += stuck[k] ? 1 : 0;
    v.problems.insert(v.problems.end(), found[k].begin(), found[k].end());
  }
  return v;
}

void FaultJob::JudgeImagesJob(Verdict& v, const std::string& killed, pid_t killed_pid) {
  auto live = LiveImagesJob();
  std::string said;
  if (!live.empty()) {
    // The job runs in place (the command stopped before CRIU took it, or CRIU failed, or
    // it brought the job back): as after a checkpoint or restore in place.
    said = RecoverInPlace(v, live, killed_pid);
  } else {
    // The job is on disk: `inspect` names the images' state, `restore --images-dir` brings
    // the job back.
    const Ran in = Cusnap({"inspect", state_dir_});
    if (in.status != 0) {
      v.problems.push_back("the job's processes are gone and 'cusnap inspect " + state_dir_ +
                           "' exited " + std::to_string(in.status) + ": " + LastLine(in.err));
    }
    v.recovery = "restore --images-dir";
    const Ran rec = Cusnap(CliArgs("restore-images"));
    if (rec.status != 0) {
      v.problems.push_back("the job's processes are gone; 'cusnap restore --images-dir' exited " +
                           std::to_string(rec.status) + ": " + Said(rec.err));
    }
    said = rec.out + rec.err;
    live = LiveImagesJob();
    ExpectActive(v, live);
  }
  if (killed == "root" && live.contains("child") &&
      said.find(std::to_string(killed_pid)) == std::string::npos) {
    v.problems.push_back("the memory of root (pid " + std::to_string(killed_pid) +
                         "), which died, is not named by " +
                         (v.recovery.empty() ? std::string("status") : "'cusnap " + v.recovery + "'"));
  }
  std::set<std::string> survivors;
  for (const auto& [name, pid] : images_pids_) {
    if (name != killed) survivors.insert(name);
  }
  // Go, then every survivor's word on each allocation it sees, within a bound (its last
  // line: PASS or FAIL).
  std::ofstream(images_job_dir_ + "/go").put('\n');
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kAnswerMs);
  std::map<std::string, ImagesJobSays> says;
  for (;;) {
    const std::string log = ReadText(images_log_);
    bool all = true;
    for (const auto& role : survivors) {
      says[role] = Says(log, role);
      all = all && !says[role].final.empty();
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const auto& role : survivors) {
    const ImagesJobSays& s = says[role];
    if (s.final.empty()) {
      ++v.stuck;
      v.problems.push_back(role + " did not check its bytes within " + std::to_string(kAnswerMs) +
                           " ms");
      continue;
    }
    for (const auto& [allocation, why] : s.lost) {
      if (kImagesCreator.at(allocation) == killed) continue;
      v.bytes_lost += kImagesJobMiB << 20;
      v.problems.push_back(role + " lost allocation " + std::to_string(allocation) + ":" + why);
    }
    // A FAIL about its peer is expected when the peer was killed.
    if (s.final.rfind("FAIL", 0) == 0 && killed.empty()) {
      v.problems.push_back(role + " says " + s.final);
    }
  }
}

}  // namespace faults
