// The fault matrix's job and one case's run (fault_job.h).
#include "fault_job.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

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

}  // namespace

void FaultJob::TearDown() {
  // A case may leave survivors held at their gate: "exit" would wait for them.
  for (Worker* w : Live()) Kill(*w);
  JobTest::TearDown();
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
  std::vector<std::string> args = {command};
  args.insert(args.end(), target_.begin(), target_.end());
  args.insert(args.end(), {"--state-dir", state_dir_});
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
      const std::string where = line.substr(std::string(kPauseMark).size() + command.size() + 1);
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
  };
  std::vector<Mark> marks;
  std::map<std::string, pid_t> pids;
  for (const auto& [name, w] : by_name_) pids[name] = w->pid;
  const auto log_of = [&](pid_t pid) { return call_log + "/" + std::to_string(pid) + ".calls"; };
  const Ran r = RunPaused(command, command + ":*:*", {{"SIMCUDA_CALL_LOG", call_log}},
                          [&](pid_t cli, const std::string& where) {
                            pids["cli"] = cli;
                            Mark m;
                            m.phase = where.substr(0, where.rfind(':'));
                            m.when = where.substr(where.rfind(':') + 1);
                            for (const auto& [name, pid] : pids) m.lines[name] = Lines(log_of(pid)).size();
                            marks.push_back(std::move(m));
                            ::kill(cli, SIGCONT);
                          });
  EXPECT_EQ(r.status, 0) << "the clean " << command << " of the enumeration failed:\n"
                         << r.out << r.err;
  CommandPlan plan;
  std::map<std::string, std::vector<std::string>> logs;
  for (const auto& [name, pid] : pids) logs[name] = Lines(log_of(pid));
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

Verdict FaultJob::RunCase(const Case& c) {
  Verdict v;
  if (c.command == "restore") {
    const Ran ck = Checkpoint(state_dir_);
    if (ck.status != 0) {
      v.problems.push_back("the clean checkpoint before the restore exited " +
                           std::to_string(ck.status) + ": " + LastLine(ck.err));
      return v;
    }
  }
  std::map<std::string, std::string> env;
  std::string pause = c.command + ":" + c.phase + ":" + c.when;
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
        // A restore that falls back to recover pauses at read_state twice: the second
        // pause finds the participant dead already (pid -1) and keeps the first's pid.
        killed = c.process;
        if (by_name_.at(c.process)->pid > 0) killed_pid = by_name_.at(c.process)->pid;
        Kill(*by_name_.at(c.process));
        ::kill(cli, SIGCONT);
        break;
      case Kind::kDriverError:
        if (c.process != "cli") {
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

  // `status` must name the state of every survivor.
  const Ran st = Cusnap({"status", "--all", "--json"});
  const auto phases = PhasesByPid(st.out);
  std::set<std::string> seen;
  for (Worker* w : Live()) {
    const auto it = phases.find(w->pid);
    if (it == phases.end()) {
      v.problems.push_back("status does not name " + w->name + " (pid " + std::to_string(w->pid) +
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
    rec = Restore(state_dir_);
  } else {
    v.recovery = "recover --all";
    rec = Cusnap({"recover", "--all", "--state-dir", state_dir_});
  }
  if (!v.recovery.empty() && rec.status != 0) {
    std::string states;
    for (const auto& s : seen) states += (states.empty() ? "" : ",") + s;
    v.problems.push_back("after the fault the job was " + states + "; 'cusnap " + v.recovery +
                         "' exited " + std::to_string(rec.status) + ": " + LastLine(rec.err));
  }
  const bool survivors_import_from_dead = std::any_of(views_.begin(), views_.end(), [&](const auto& view) {
    return !killed.empty() && view.worker->pid > 0 && creator_.at(view.allocation) == killed;
  });
  if (survivors_import_from_dead) {
    // Memory whose creator died (its importers survive) is named, not silently dropped: by
    // the recovery command, or by `status` when none was needed.
    const Ran after = Cusnap({"status", "--all"});
    const std::string text = v.recovery.empty() ? after.out + after.err : rec.out + rec.err;
    if (text.find(std::to_string(killed_pid)) == std::string::npos) {
      v.problems.push_back("the memory of " + killed + " (pid " + std::to_string(killed_pid) +
                           "), which died, is not named by " +
                           (v.recovery.empty() ? std::string("status") : "'cusnap " + v.recovery + "'"));
    }
  }
  const auto final_phases = PhasesByPid(Cusnap({"status", "--all", "--json"}).out);
  for (Worker* w : Live()) {
    const auto it = final_phases.find(w->pid);
    const std::string phase = it == final_phases.end() ? "(not listed)" : it->second;
    if (phase != "active") {
      v.problems.push_back("after recovery " + w->name + " (pid " + std::to_string(w->pid) +
                           ") is " + phase);
    }
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

}  // namespace faults
