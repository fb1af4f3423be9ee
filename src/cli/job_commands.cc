// The job commands `cusnap checkpoint`, `cusnap restore` and `cusnap recover`, and Drive,
// which every command that runs a coordinator sequence goes through (images.cc's dump and
// images restore too): load the driver, run the sequence, print phase lines (or one JSON
// document) and map the outcome to an exit status.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <set>
#include <string_view>

#include "cli/checks.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/interrupt_watch.h"
#include "cli/output.h"
#include "common/endpoint_client.h"
#include "common/text.h"
#include "cli/test_pause.h"
#include "coordinator/coordinator.h"
#include "coordinator/native/lazy_driver.h"
#include "coordinator/participants/hold.h"
#include "coordinator/participants/command_lock.h"
#include "coordinator/participants/lease.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/record/checkpoint_pointer.h"
#include "coordinator/record/records.h"
#include "coordinator/record/state_file.h"

namespace cusnap::cli {

int ExitFor(coord::Outcome outcome) {
  switch (outcome) {
    case coord::Outcome::kOk: return kExitOk;
    case coord::Outcome::kRefused: return kExitRefused;
    case coord::Outcome::kFailedAfterChange: return kExitFailedAfterChange;
    case coord::Outcome::kRestoreRefused: return kExitRestoreRefused;
    case coord::Outcome::kRolledForward: return kExitFailedAfterChange;
  }
  return kExitError;
}

int EndUntouched(const char* command, bool json, const std::string& problem, int rc) {
  const std::string message = problem + "; nothing was changed";
  if (json) std::printf("%s\n", UntouchedToJson(command, rc, {message}).dump(2).c_str());
  std::fprintf(stderr, "cusnap %s: %s\n", command, message.c_str());
  return rc;
}

int EndRefused(const char* command, bool json, const std::string& problem, int rc) {
  const std::string refused = "refused; nothing was changed";
  if (json) std::printf("%s\n", UntouchedToJson(command, rc, {problem, refused}).dump(2).c_str());
  std::fprintf(stderr, "cusnap %s: %s\ncusnap %s: %s\n", command, problem.c_str(), command,
               refused.c_str());
  return rc;
}

namespace {

/// A command an interrupt stopped before anything was changed for good (the report says
/// so and what it undid was undone): exit 128 + the signal, as a shell reports a process the
/// signal ended. Otherwise ExitFor(outcome): a command interrupted after its first
/// destructive step finished, and its outcome stands.
int ExitAfter(const coord::CommandReport& report, int signo) {
  const bool stopped = report.interrupted && (report.outcome == coord::Outcome::kRefused ||
                                              report.outcome == coord::Outcome::kRestoreRefused);
  return stopped && signo != 0 ? 128 + signo : ExitFor(report.outcome);
}

/// How `cusnap recover` names the job after a failure: as the command did, unless --pid's
/// process has ended since (a launcher killed while its ranks were held): then --all, which
/// finds the processes left by their endpoints.
std::string RecoverTarget(const Target& target) {
  if (target.all || target.pid <= 0) return "--all";
  if (coord::ProcessExited(target.pid)) {
    return "--all' (" + ProcessText(target.pid) + " has ended; the processes left are " +
           "found by their endpoints) or 'cusnap recover --pid <a process left>";
  }
  return PidOption(target.pid);
}

/// After a refusal: the state the job is in, as its shims say now (a refusal changed
/// nothing, but the job need not be running: checkpointing a checkpointed job is refused
/// too). ", the job keeps running", ", the job stays checkpointed", ... or "" when no shim
/// answers and no --pid process exists.
std::string JobStateTail(const Target& target, const std::string& control_dir) {
  const std::vector<int> pids = target.all ? coord::EndpointPids(control_dir)
                                           : coord::EndpointPidsInTree(control_dir, target.pid);
  // A held process cannot answer (it is stopped): said from its marker, at once.
  if (std::any_of(pids.begin(), pids.end(),
                  [&](int pid) { return coord::IsHeld(control_dir, pid); })) {
    return ", the job stays checkpointed and held (stopped until 'cusnap restore')";
  }
  // Another command at work on it decides its state: "stays checkpointed" must not be said
  // of a job whose checkpoint is still running.
  for (int pid : pids) {
    auto lock = coord::CommandLock::Take(EndpointPath(control_dir, pid), ProcessText(pid));
    if (!lock && lock.error().code == EBUSY) {
      return ", and another cusnap command is at work on the job (" + ProcessText(pid) +
             "): that command's own output says what state it leaves the job in";
    }
  }
  std::set<proto::ShimState> states;
  for (int pid : pids) {
    // Stopped by someone else, it cannot answer either: it stays as it was.
    if (coord::ProcessState(pid) == 'T') {
      return ", its processes stay as they were (" + ProcessText(pid) + " stopped)";
    }
    if (auto id = coord::Identify(*coord::ConnectEndpoint(control_dir, pid))) states.insert(id->state);
  }
  if (states.empty()) {
    // No shim to ask here: a job started without one runs on, untouched; one whose shims use
    // another control directory (the refusal named it) may be checkpointed: not said.
    const bool shim_elsewhere = target.pid > 0 && coord::ShimControlDir(target.pid).has_value();
    return target.pid > 0 && !shim_elsewhere && coord::ProcessStartTime(target.pid)
               ? ", the job keeps running"
               : "";
  }
  if (states.size() > 1) return ", each of its processes stays as it was (see 'cusnap status')";
  switch (*states.begin()) {
    case proto::ShimState::kActive: return ", the job keeps running";
    case proto::ShimState::kReleased: return ", the job stays checkpointed";
    default:
      return ", the job stays " + coord::Lowercase(proto::ShimStateName(*states.begin())) +
             " (see 'cusnap status')";
  }
}

/// The name of the first phase that failed ("?" when none did).
std::string FailedPhase(const coord::CommandReport& report) {
  for (const auto& p : report.phases) {
    if (!p.ok()) return p.name;
  }
  return report.phases.empty() ? "?" : report.phases.back().name;
}

/// What the job lost for good (CommandReport::lost), joined by "; ".
std::string LostText(const coord::CommandReport& report) {
  std::string text;
  for (const auto& l : report.lost) text += (text.empty() ? "" : "; ") + l;
  return text;
}

/// What the user reads at the end, on stderr: every error, then what state the job is in.
void PrintErrors(const char* command, const coord::CommandReport& report, const Target& target,
                 const std::string& control_dir, int signo) {
  for (const auto& n : report.notes) std::fprintf(stderr, "cusnap %s: note: %s\n", command, n.c_str());
  for (const auto& e : report.errors) std::fprintf(stderr, "cusnap %s: %s\n", command, e.c_str());
  if (ExitAfter(report, signo) != ExitFor(report.outcome)) {
    std::fprintf(stderr, "cusnap %s: interrupted (%s); nothing was changed, %s\n", command,
                 SignalName(signo).c_str(),
                 report.outcome == coord::Outcome::kRefused
                     ? "every participant was resumed: the job keeps running"
                     : "the job is still checkpointed: run 'cusnap restore' again to restore it");
    return;
  }
  switch (report.outcome) {
    case coord::Outcome::kOk: break;
    case coord::Outcome::kRefused:
    case coord::Outcome::kRestoreRefused:
      if (!report.lost.empty()) {
        // A participant died under the command: the job is not as it was.
        std::fprintf(stderr, "cusnap %s: refused; the job lost %s; nothing else was "
                     "changed%s\n", command, LostText(report).c_str(),
                     JobStateTail(target, control_dir).c_str());
        break;
      }
      std::fprintf(stderr, "cusnap %s: refused; nothing was changed%s\n", command,
                   JobStateTail(target, control_dir).c_str());
      break;
    case coord::Outcome::kRolledForward:
      if (!report.lost.empty()) {
        std::fprintf(stderr, "cusnap %s: FAILED in phase '%s' after the point of no return; the "
                     "job was rolled forward and runs again without what it lost: %s; the "
                     "checkpoint did not happen\n", command, FailedPhase(report).c_str(),
                     LostText(report).c_str());
        break;
      }
      std::fprintf(stderr, "cusnap %s: FAILED in phase '%s' after the point of no return; the "
                   "job was rolled forward and runs as before, every byte intact: the "
                   "checkpoint did not happen\n", command, FailedPhase(report).c_str());
      break;
    case coord::Outcome::kFailedAfterChange:
      if (!report.finish_with.empty()) {
        std::fprintf(stderr, "cusnap %s: FAILED in phase '%s' after the job was changed; %s\n",
                     command, FailedPhase(report).c_str(), report.finish_with.c_str());
        break;
      }
      // Each shim keeps the state it reached (status shows it, with the failure); recover
      // goes on from there.
      std::fprintf(stderr, "cusnap %s: FAILED in phase '%s' after the job was changed; it is "
                   "not running normally yet: each process keeps its state ('cusnap status' "
                   "shows it and why), and 'cusnap recover %s' (or 'cusnap restore') with the "
                   "same --state-dir finishes it\n", command, FailedPhase(report).c_str(),
                   RecoverTarget(target).c_str());
      break;
  }
}


/// A held job's processes are stopped (coordinator/participants/hold.h): their endpoints answer only
/// once continued, so restore and recover continue them before discovery. What cannot be
/// continued is said here; discovery then names those processes as unreachable.
}  // namespace

std::vector<int> ContinueHeld(const char* command, const Target& target) {
  std::vector<int> continued;
  for (const auto& problem :
       coord::ContinueHeldJob(ControlDir(), target.all ? 0 : target.pid, &continued)) {
    std::fprintf(stderr, "cusnap %s: %s\n", command, problem.c_str());
  }
  return continued;
}

int HoldAgainUnlessChanged(const char* command, const std::vector<int>& continued, int rc) {
  // Exit 0 restored the job, exit 4 changed it (recover goes on from there): both leave the
  // processes running. Any other exit changed nothing: the job goes back to being held.
  if (rc == kExitOk || rc == kExitFailedAfterChange || continued.empty()) return rc;
  const std::string control_dir = ControlDir();
  for (const auto& problem : coord::HoldAgain(control_dir, continued)) {
    std::fprintf(stderr, "cusnap %s: %s\n", command, problem.c_str());
  }
  const auto held = std::count_if(continued.begin(), continued.end(),
                                  [&](int pid) { return coord::IsHeld(control_dir, pid); });
  if (held > 0) {
    std::fprintf(stderr, "cusnap %s: %td held process%s stopped again, as before the command\n",
                 command, held, held == 1 ? "" : "es");
  }
  return rc;
}

namespace {

/// --all acts on the endpoints of this PID namespace: a job in a namespace of its own (one
/// `restore --images-dir` made, cli/pid_namespace.h) is one job of its own, with its own
/// state directory, and is named with --pid. Said on stderr, so that `--all` never leaves
/// one out silently.
void NoteNamespacedJobsLeftOut(const char* command, const std::string& control_dir) {
  for (const ForeignEndpoint& f : ForeignEndpoints(control_dir)) {
    std::fprintf(stderr, "cusnap %s: note: --all leaves out pid %d here (pid %d of a job in a "
                 "PID namespace of its own); act on that job with --pid %d\n",
                 command, f.pid_here, f.pid_there, f.pid_here);
  }
}

/// "job root pid N" (N as the user's PID namespace numbers it; scripts take the fourth
/// word), with "(pid M in its PID namespace)" when the job numbers it otherwise.
std::string JobRootLine(int root) {
  const int here = CallerPid(root);
  std::string line = "job root pid " + std::to_string(here);
  if (here != root) line += " (pid " + std::to_string(root) + " in its PID namespace)";
  return line;
}

}  // namespace

int Drive(const char* command, const Target& target, bool json, size_t phases, int refused,
          const SequenceRun& run) {
  // The target first: a wrong --pid is named as what it is (a thread, another user's
  // process, a stale endpoint) before the driver is loaded or anything is asked.
  // Before any thread starts: from here on SIGINT and SIGTERM stop or finish the command.
  coord::Interrupt interrupt;
  InterruptWatch watch(command, interrupt);
  const std::string control_dir = ControlDir();
  const std::string problem = target.pid > 0 ? CheckTargetPid(target.pid, control_dir)
                                             : CheckControlDirReadable(control_dir);
  if (!problem.empty()) return EndUntouched(command, json, problem, refused);
  if (target.all) NoteNamespacedJobsLeftOut(command, control_dir);
  // With nothing to act on, the sequence refuses at discovery and never needs the driver;
  // otherwise the driver is loaded now, so a driver that cannot load is named before any
  // participant is contacted (the job is as it was).
  coord::LazyDriver driver(LoadChosenDriver);
  std::string described = "not loaded (no cusnap endpoint to act on)";
  if (!target.all || !coord::EndpointPids(control_dir).empty()) {
    auto loaded = driver.Load();
    if (!loaded) return EndUntouched(command, json, loaded.error().message, kExitError);
    described = (*loaded)->Describe();
    if (!json) std::printf("driver: %s\n", described.c_str());
  }
  std::fflush(stdout);  // a reader of the phase lines sees the command has started
  coord::DiscoveryOptions discovery{control_dir, target.pid, target.all};
  PhasePrinter printer(stdout, json, ::isatty(STDOUT_FILENO) == 1, phases);
  std::unique_ptr<coord::PhaseObserver> paused;  // the fault matrix's knob (test_pause.h)
  const coord::CommandReport report = run(coord::EndpointDiscoverer(discovery), driver,
                                          WithTestPause(command, printer, paused), interrupt);
  const int rc = ExitAfter(report, watch.signal());
  // A restore or recover of one job names its root as the user acts on it (a namespaced
  // job's pid here differs from its own): one line, or two JSON keys. `--all` may cover
  // several jobs: none is named.
  const bool brings_back = std::string_view(command) == "restore" || std::string_view(command) == "recover";
  const int root = !brings_back                 ? 0
                   : report.restored_root > 0 ? report.restored_root
                                              : target.pid;
  if (json) {
    nlohmann::json doc = ReportToJson(command, described, report, rc);
    if (rc == kExitOk && root > 0) {
      doc["root_pid"] = CallerPid(root);
      doc["root_pid_in_job_namespace"] = root;
    }
    std::printf("%s\n", doc.dump(2).c_str());
  }
  PrintErrors(command, report, target, control_dir, watch.signal());
  if (rc == kExitOk && !json) {
    if (!report.images_dir.empty()) {
      std::printf("%s: done (images in %s)\n", command, report.images_dir.c_str());
    } else if (report.state_file.empty()) {
      std::printf("%s: done\n", command);
    } else {
      std::printf("%s: done (state file %s)\n", command, report.state_file.c_str());
    }
    if (root > 0) std::printf("%s\n", JobRootLine(root).c_str());
    // Done, but not whole: the last word names what did not come back.
    if (!report.lost.empty()) {
      std::printf("%s: the job runs without what it lost: %s\n", command,
                  LostText(report).c_str());
    }
  }
  return rc;
}

namespace {

/// After a checkpoint into `state_dir` succeeded: each participant its state file records
/// points at it (coord::WriteCheckpointPointer), for `status` and `restore`. A pointer that
/// cannot be written is said, and changes nothing else.
void PointAtCheckpoint(const std::string& state_dir) {
  auto state = coord::ReadStateFile(state_dir);
  if (!state) return;
  for (const coord::ParticipantState& p : state->participants) {
    if (auto written = coord::WriteCheckpointPointer(ControlDir(), p.pid, p.start_time, state_dir);
        !written) {
      std::fprintf(stderr, "cusnap checkpoint: note: %s (status will not show where the "
                   "checkpoint is)\n", written.error().message.c_str());
    }
  }
}

/// After a restore or recover from `state_dir` finished the checkpoint: its pointers go.
void ForgetCheckpoint(const std::string& state_dir) {
  auto state = coord::ReadStateFile(state_dir);
  if (!state) return;
  std::vector<int> pids;
  for (const coord::ParticipantState& p : state->participants) pids.push_back(p.pid);
  coord::RemoveCheckpointPointers(ControlDir(), pids);
}

/// When `state_dir` holds no state file but a process of `target` points at its checkpoint
/// elsewhere (coord::CheckpointStateDirOf): "no checkpoint in D; the job's checkpoint is in E:
/// give --state-dir E". "" otherwise.
std::string CheckpointElsewhere(const char* command, const Target& target,
                                const std::string& state_dir) {
  if (::access(coord::StateFilePath(state_dir).c_str(), F_OK) == 0) return "";
  const std::string control_dir = ControlDir();
  const std::vector<int> pids =
      target.all ? coord::EndpointPids(control_dir) : coord::ProcessTree(target.pid);
  for (int pid : pids) {
    const auto there = coord::CheckpointStateDirOf(control_dir, pid);
    if (!there) continue;
    const std::string how = target.all ? "--all" : PidOption(target.pid);
    if (::access(coord::StateFilePath(*there).c_str(), F_OK) != 0) {
      // Moved or removed since: what each shim holds still brings the job back.
      return "no checkpoint in " + state_dir + "; the job's checkpoint was in " + *there +
             ", which holds no state file now: run 'cusnap " + command + " " + how +
             " --state-dir <where it is now>', or 'cusnap recover " + how + "' to bring the "
             "job back from what its processes hold";
    }
    return "no checkpoint in " + state_dir + "; the job's checkpoint is in " + *there +
           ": run 'cusnap " + command + " " + how + " --state-dir " + *there + "'";
  }
  return "";
}

}  // namespace

int CheckpointCommand(const Target& target, const std::string& state_dir,
                      unsigned lock_timeout_ms, bool json) {
  coord::CheckpointOptions options{
      state_dir, lock_timeout_ms, target.all ? "--all" : PidOption(target.pid)};
  options.lease_ms = coord::LeaseMsFromEnvironment();
  const int rc = Drive("checkpoint", target, json, coord::kCheckpointPhaseCount, kExitRefused,
               [&](const coord::Discoverer& d, coord::CheckpointDriver& drv, coord::PhaseObserver& o,
                   coord::Interrupt& i) { return coord::Checkpoint(options, d, drv, o, &i); });
  if (rc == kExitOk) PointAtCheckpoint(state_dir);
  return rc;
}

bool ParseDeviceMapArg(const char* command, const std::string& text,
                       std::vector<coord::DevicePair>& out) {
  if (text.empty()) return true;
  auto pairs = coord::ParseDeviceMap(text);
  if (!pairs) {
    std::fprintf(stderr, "cusnap %s: --device-map: %s\n", command, pairs.error().message.c_str());
    return false;
  }
  out = std::move(*pairs);
  return true;
}

int RestoreCommand(const Target& target, const std::string& state_dir,
                   const std::string& device_map, bool json) {
  coord::RestoreOptions options{state_dir, {}, coord::LeaseMsFromEnvironment()};
  if (!ParseDeviceMapArg("restore", device_map, options.device_map)) return kExitUsage;
  if (const std::string elsewhere = CheckpointElsewhere("restore", target, state_dir);
      !elsewhere.empty()) {
    return EndRefused("restore", json, elsewhere, kExitRestoreRefused);
  }
  const std::vector<int> continued = ContinueHeld("restore", target);
  const int rc = Drive("restore", target, json, coord::kRestorePhaseCount, kExitRestoreRefused,
                       [&](const coord::Discoverer& d, coord::CheckpointDriver& drv,
                           coord::PhaseObserver& o, coord::Interrupt& i) {
                         return coord::Restore(options, d, drv, o, &i);
                       });
  if (rc == kExitOk) ForgetCheckpoint(state_dir);
  return HoldAgainUnlessChanged("restore", continued, rc);
}

int RecoverCommand(const Target& target, const std::string& state_dir,
                   const std::string& device_map, bool json) {
  coord::RecoverOptions options{state_dir, {}, coord::LeaseMsFromEnvironment()};
  if (!ParseDeviceMapArg("recover", device_map, options.device_map)) return kExitUsage;
  const std::vector<int> continued = ContinueHeld("recover", target);
  const int rc = Drive("recover", target, json, coord::kRecoverPhaseCount, kExitRestoreRefused,
                       [&](const coord::Discoverer& d, coord::CheckpointDriver& drv,
                           coord::PhaseObserver& o, coord::Interrupt& i) {
                         return coord::Recover(options, d, drv, o, &i);
                       });
  if (rc == kExitOk) ForgetCheckpoint(state_dir);
  return HoldAgainUnlessChanged("recover", continued, rc);
}

}  // namespace cusnap::cli
