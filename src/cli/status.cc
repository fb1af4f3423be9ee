// `cusnap status`: every participant's identity, phase and table counts (read-only; the
// driver is not loaded, so status works whatever state the job is in), and, for the whole
// control directory, the stale endpoint sockets of processes that no longer exist or whose
// pid was reused (removed with --prune).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include "cli/checks.h"

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "common/text.h"
#include "coordinator/participants/command_lock.h"
#include "coordinator/coordinator.h"
#include "coordinator/participants/hold.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/images/restored_aliases.h"
#include "coordinator/record/checkpoint_pointer.h"
#include "coordinator/record/records.h"
#include "coordinator/record/state_file.h"
#include "cli/version.h"

namespace cusnap::cli {
namespace {

/// Unlinks each path of `listed` that `now` (the same kind of stale files, found again just
/// before) still holds; appends it to `removed`, or why not to `errors` (gone already: fine).
void RemoveStillStale(const std::vector<std::string>& listed, const std::vector<std::string>& now,
                      std::vector<std::string>& removed, std::vector<std::string>& errors) {
  for (const std::string& path : listed) {
    if (std::find(now.begin(), now.end(), path) == now.end()) continue;
    if (::unlink(path.c_str()) == 0) {
      removed.push_back(path);
    } else if (errno != ENOENT) {
      errors.push_back("cannot remove " + path + ": " + std::strerror(errno));
    }
  }
}

/// Removes the stale endpoint sockets of `stale`, hold markers, start-time aliases and
/// checkpoint pointers that are still stale now (checked again just before each unlink: a live endpoint is never
/// removed). Returns the paths removed; failures go to `errors`.
std::vector<std::string> Prune(const std::string& control_dir,
                               const std::vector<StaleEndpoint>& stale,
                               const std::vector<std::string>& stale_markers,
                               const std::vector<std::string>& stale_aliases,
                               const std::vector<std::string>& stale_pointers,
                               std::vector<std::string>& errors) {
  std::vector<std::string> removed;
  const auto now = StaleEndpoints(control_dir);
  for (const auto& s : stale) {
    const bool still = std::any_of(now.begin(), now.end(), [&](const StaleEndpoint& n) {
      return n.path == s.path && n.reused == s.reused;
    });
    if (!still) continue;
    if (::unlink(s.path.c_str()) == 0) {
      removed.push_back(s.path);
    } else {
      errors.push_back("cannot remove " + s.path + ": " + std::strerror(errno));
    }
  }
  // Hold markers of processes that ended while held (coordinator/participants/hold.h), and start-time
  // aliases of restored processes that ended: each still stale now.
  RemoveStillStale(stale_markers, coord::StaleHoldMarkersBelow(control_dir), removed, errors);
  // Command locks (coordinator/participants/command_lock.h) of processes whose endpoint is gone now.
  for (const std::string& dir : coord::JobControlDirs(control_dir)) {
    const auto locks = coord::StaleCommandLocks(dir);
    RemoveStillStale(locks, locks, removed, errors);
  }
  RemoveStillStale(stale_aliases, coord::StaleRestoredAliases(control_dir), removed, errors);
  RemoveStillStale(stale_pointers, coord::StaleCheckpointPointers(control_dir), removed, errors);
  return removed;
}

/// The lines of `text` that are not empty, in order.
std::vector<std::string> NonEmptyLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

nlohmann::json OtherNamespacesJson(const std::vector<ForeignEndpoint>& foreign) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : foreign) {
    list.push_back({{"path", f.path}, {"pid_there", f.pid_there}, {"pid_here", f.pid_here}});
  }
  return list;
}

/// What `cusnap status` found in the control directory, in the order it prints it.
struct StatusScan {
  std::string control_dir;
  std::vector<int> pids;                   ///< the endpoints asked
  std::vector<StaleEndpoint> stale;        ///< listed, never an error; removed with --prune
  std::vector<std::string> stale_markers;  ///< hold markers of processes that ended held
  std::vector<std::string> stale_aliases;  ///< start-time aliases of restored processes that ended
  std::vector<std::string> stale_pointers; ///< checkpoint pointers of processes that ended
  std::vector<ForeignEndpoint> foreign;    ///< endpoints of jobs in PID namespaces of their own
  std::vector<std::string> removed;        ///< what --prune removed
  std::vector<coord::ParticipantStatus> entries;
  /// The checkpoints the participants found are in (state directories, in order), each with
  /// the participants its state file records whose processes no longer run.
  std::vector<std::pair<std::string, std::vector<int>>> checkpoints;
  /// Other control directories with cusnap processes, when none answered here.
  std::map<std::string, std::vector<int>> elsewhere;
  std::vector<std::string> errors;
};

/// `--pid P`: the endpoints of P's process tree. kExitOk, or kExitError when P cannot be a
/// target (said on stderr).
int FindTreeEndpoints(int pid, StatusScan& scan) {
  if (const std::string problem = CheckTargetPid(pid, scan.control_dir); !problem.empty()) {
    std::fprintf(stderr, "cusnap status: %s\n", problem.c_str());
    return kExitError;
  }
  scan.pids = coord::EndpointPidsInTree(scan.control_dir, pid);
  if (scan.pids.empty()) {
    // No shim in that tree, or a shim serving its endpoint in another control directory
    // (named): nothing can be shown, which "no participants" alone would hide.
    std::fprintf(stderr, "cusnap status: %s\n",
                 coord::NoEndpointInTreeText(pid, coord::ProcessTree(pid), scan.control_dir)
                     .c_str());
    return kExitError;
  }
  return kExitOk;
}

/// No --pid: every endpoint of the control directory, and its stale and foreign files. Pids
/// whose socket is stale (reused by another process) are left out of the endpoints asked.
/// kExitOk, or kExitError when the directory cannot be read (said on stderr).
int FindAllEndpoints(StatusScan& scan) {
  const std::string& control_dir = scan.control_dir;
  if (const std::string problem = CheckControlDirReadable(control_dir); !problem.empty()) {
    std::fprintf(stderr, "cusnap status: %s\n", problem.c_str());
    return kExitError;
  }
  scan.stale = StaleEndpoints(control_dir);
  scan.stale_markers = coord::StaleHoldMarkersBelow(control_dir);
  scan.stale_aliases = coord::StaleRestoredAliases(control_dir);
  scan.stale_pointers = coord::StaleCheckpointPointers(control_dir);
  scan.foreign = ForeignEndpoints(control_dir);
  for (int pid : coord::EndpointPids(control_dir)) {
    const bool reused = std::any_of(scan.stale.begin(), scan.stale.end(),
                                    [&](const StaleEndpoint& s) { return !s.job_dir && s.pid == pid; });
    if (!reused) scan.pids.push_back(pid);
  }
  return kExitOk;
}

/// The checkpoint each checkpointed participant (held, or in a phase other than ACTIVE)
/// points at (coord::CheckpointStateDirOf), and the participants each one's state file
/// records that no longer run: each one an error (status cannot show the whole job).
void FindCheckpoints(StatusScan& scan) {
  for (const auto& e : scan.entries) {
    if (!e.unreachable.empty()) continue;
    if (e.held.empty() && e.identity.state == proto::ShimState::kActive) continue;
    const auto dir = coord::CheckpointStateDirOf(scan.control_dir, e.identity.pid);
    const bool known = dir && std::any_of(scan.checkpoints.begin(), scan.checkpoints.end(),
                                          [&](const auto& c) { return c.first == *dir; });
    if (!dir || known) continue;
    std::vector<int> missing;
    if (auto state = coord::ReadStateFile(*dir)) {
      for (const coord::ParticipantState& p : state->participants) {
        const bool runs =
            coord::ProcessStartTime(p.pid) == p.start_time && !coord::ProcessExited(p.pid);
        if (runs) continue;
        missing.push_back(p.pid);
        scan.errors.push_back(ProcessText(p.pid) + ", a participant of the checkpoint in " + *dir +
                              ", no longer runs");
      }
    }
    scan.checkpoints.emplace_back(*dir, missing);
  }
}

/// Asks every endpoint found for its identity and tables. Nobody here: where the user's
/// cusnap processes are instead (another CUSNAP_CONTROL_DIR or XDG_RUNTIME_DIR), rather than
/// "no participants" alone.
void AskParticipants(const Target& target, StatusScan& scan) {
  std::vector<std::unique_ptr<coord::Participant>> participants;
  for (int pid : scan.pids) participants.push_back(coord::ConnectEndpoint(scan.control_dir, pid));
  scan.entries = coord::CollectStatus(participants, scan.errors);
  FindCheckpoints(scan);
  if (scan.entries.empty() && target.pid <= 0) {
    scan.elsewhere = coord::OtherShimControlDirs(scan.control_dir);
  }
}

/// One participant's fields as a JSON object, its pid as the job numbers it.
nlohmann::json ParticipantFieldsJson(const coord::ParticipantStatus& e) {
  if (!e.unreachable.empty()) {
    return {{"pid", e.identity.pid},
            {"start_time", e.identity.start_time},
            {"phase", "unreachable"},
            {"unreachable", e.unreachable}};
  }
  return {{"pid", e.identity.pid},
          {"start_time", e.identity.start_time},
          {"phase", coord::Lowercase(proto::ShimStateName(e.identity.state))},
          {"allocations", e.allocations},
          {"created", e.created},
          {"mappings", e.mappings},
          {"untracked_imports", e.identity.untracked_imports},
          {"tracked_bytes", e.identity.tracked_bytes},
          {"created_total", e.identity.created_total},
          {"created_host_numa", e.identity.created_host_numa},
          {"failure", e.identity.failure},
          {"inspect_error", e.inspect_error},
          {"held", !e.held.empty()},
          {"settings_not_taken", NonEmptyLines(e.identity.settings)},
          {"shim", ShimBuildInfoInFile(coord::MappedShimPath(e.identity.pid))}};
}

/// One participant as a JSON object: "pid" as the caller's PID namespace numbers it, and
/// "pid_in_job_namespace" beside it when the job's own namespace numbers it otherwise.
nlohmann::json ParticipantJson(const coord::ParticipantStatus& e) {
  nlohmann::json doc = ParticipantFieldsJson(e);
  doc["pid"] = CallerPid(e.identity.pid);
  if (CallerPid(e.identity.pid) != e.identity.pid) doc["pid_in_job_namespace"] = e.identity.pid;
  return doc;
}

/// The checkpoints found, each {"state_dir", "missing_participants"}.
nlohmann::json CheckpointsJson(const StatusScan& scan) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [dir, missing] : scan.checkpoints) {
    list.push_back({{"state_dir", dir}, {"missing_participants", missing}});
  }
  return list;
}

/// `status --json`: the whole scan as one JSON document on stdout.
void PrintStatusJson(const StatusScan& scan) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : scan.entries) list.push_back(ParticipantJson(e));
  nlohmann::json stale_list = nlohmann::json::array(), stale_reasons = nlohmann::json::object();
  for (const auto& st : scan.stale) {
    stale_list.push_back(st.path);
    stale_reasons[st.path] = StaleReason(st);
  }
  std::printf("%s\n", nlohmann::json{{"control_dir", scan.control_dir},
                                     {"participants", list},
                                     {"stale_endpoints", stale_list},
                                     {"stale_reasons", stale_reasons},
                                     {"stale_hold_markers", scan.stale_markers},
                                     {"stale_restored_aliases", scan.stale_aliases},
                                     {"stale_checkpoint_pointers", scan.stale_pointers},
                                     {"other_pid_namespaces", OtherNamespacesJson(scan.foreign)},
                                     {"other_control_dirs", scan.elsewhere},
                                     {"checkpoints", CheckpointsJson(scan)},
                                     {"pruned", scan.removed},
                                     {"errors", scan.errors}}.dump(2).c_str());
}

/// The control directory's line, "no participants" when none answered, and where other
/// cusnap processes are.
void PrintControlDirLines(const StatusScan& scan) {
  std::printf("control dir: %s\n", scan.control_dir.c_str());
  struct stat dir_stat {};
  if (scan.entries.empty()) {
    std::printf("no participants%s\n", ::stat(scan.control_dir.c_str(), &dir_stat) == 0
                                            ? "" : " (the control directory does not exist)");
  }
  for (const auto& [dir, dir_pids] : scan.elsewhere) {
    std::printf("cusnap processes in another control directory: %s (pid %s): run "
                "'CUSNAP_CONTROL_DIR=%s cusnap status'\n", dir.c_str(),
                coord::PidListText(dir_pids).c_str(), dir.c_str());
  }
}

/// One participant's lines: unreachable, held, or its tables, failure and shim.
void PrintParticipantState(const coord::ParticipantStatus& e) {
  if (!e.unreachable.empty()) {
    std::printf("pid %-8d %-20s %-12s its endpoint did not answer (its error line on stderr says why)\n",
                CallerPid(e.identity.pid), coord::ProcessName(e.identity.pid).c_str(), "unreachable");
    return;
  }
  const std::string state = coord::Lowercase(proto::ShimStateName(e.identity.state));
  if (!e.held.empty()) {
    std::printf("pid %-8d %-20s %-12s %s\n", CallerPid(e.identity.pid),
                coord::ProcessName(e.identity.pid).c_str(), state.c_str(), e.held.c_str());
    return;
  }
  std::printf("pid %-8d %-20s %-12s %zu allocations (%zu created)  %zu mappings  %s tracked",
              CallerPid(e.identity.pid), coord::ProcessName(e.identity.pid).c_str(), state.c_str(),
              e.allocations, e.created,
              e.mappings, FormatBytes(e.identity.tracked_bytes).c_str());
  std::printf("  %u tracked creates over its life (%u of them in host NUMA memory)",
              e.identity.created_total, e.identity.created_host_numa);
  if (e.identity.untracked_imports > 0) {
    std::printf("  %llu untracked imports",
                static_cast<unsigned long long>(e.identity.untracked_imports));
  }
  std::printf("\n");
  if (!e.identity.failure.empty()) std::printf("    failure: %s\n", e.identity.failure.c_str());
  if (!e.inspect_error.empty()) std::printf("    inspect: %s\n", e.inspect_error.c_str());
  for (const std::string& line : NonEmptyLines(e.identity.settings)) {
    std::printf("    setting not taken: %s\n", line.c_str());
  }
  const std::string shim = ShimBuildInfoInFile(coord::MappedShimPath(e.identity.pid));
  std::printf("    shim: %s\n", shim.empty() ? "unknown (its library file cannot be read)"
                                                : shim.c_str());
}

/// PrintParticipantState, and the pid the job's own PID namespace gives it when that is not
/// the caller's.
void PrintParticipantLines(const coord::ParticipantStatus& e) {
  PrintParticipantState(e);
  if (CallerPid(e.identity.pid) != e.identity.pid) {
    std::printf("    pid %d in the job's PID namespace\n", e.identity.pid);
  }
}

/// "removed" when --prune removed `path`, else "safe to remove".
const char* PruneWord(const StatusScan& scan, const std::string& path) {
  const bool gone = std::find(scan.removed.begin(), scan.removed.end(), path) != scan.removed.end();
  return gone ? "removed" : "safe to remove";
}

/// The stale endpoints, foreign endpoints, stale hold markers and aliases, one line each.
void PrintLeftoverLines(const StatusScan& scan, bool prune) {
  for (const auto& st : scan.stale) {
    std::printf("stale endpoint %s: %s (%s)\n", st.path.c_str(), StaleReason(st).c_str(),
                PruneWord(scan, st.path));
  }
  for (const auto& f : scan.foreign) {
    std::printf("endpoint %s: pid %d of a job in a PID namespace of its own, pid %d here: "
                "see 'cusnap status --pid %d'\n", f.path.c_str(), f.pid_there, f.pid_here,
                f.pid_here);
  }
  for (const auto& marker : scan.stale_markers) {
    std::printf("stale hold marker %s: its process ended while held (%s)\n", marker.c_str(),
                PruneWord(scan, marker));
  }
  for (const auto& alias : scan.stale_aliases) {
    std::printf("stale start-time alias %s: the restored process it names ended (%s)\n",
                alias.c_str(), PruneWord(scan, alias));
  }
  for (const auto& pointer : scan.stale_pointers) {
    std::printf("stale checkpoint pointer %s: the checkpointed process it names ended (%s)\n",
                pointer.c_str(), PruneWord(scan, pointer));
  }
  // A `cusnap dump` leaves both behind when it takes a held job away; its images are what
  // a restore needs, not these files.
  if (!scan.stale_markers.empty() && !prune) {
    std::printf("(a job `cusnap dump` took to disk leaves these too: 'cusnap restore "
                "--images-dir <dir>' brings it back from its images, with or without them)\n");
  }
}

/// `status` without --json: the scan as lines on stdout.
void PrintStatusLines(const StatusScan& scan, bool prune) {
  PrintControlDirLines(scan);
  for (const auto& e : scan.entries) PrintParticipantLines(e);
  for (const auto& [dir, missing] : scan.checkpoints) {
    std::printf("checkpoint: %s\n", dir.c_str());
    for (int pid : missing) {
      std::printf("missing participant: pid %d, recorded by that checkpoint, no longer runs\n",
                  pid);
    }
  }
  PrintLeftoverLines(scan, prune);
}

}  // namespace

int StatusCommand(const Target& target, bool json, bool prune) {
  StatusScan scan;
  scan.control_dir = ControlDir();
  const int found = target.pid > 0 ? FindTreeEndpoints(target.pid, scan) : FindAllEndpoints(scan);
  if (found != kExitOk) return found;
  if (prune) {
    scan.removed = Prune(scan.control_dir, scan.stale, scan.stale_markers, scan.stale_aliases,
                         scan.stale_pointers, scan.errors);
  }
  AskParticipants(target, scan);
  if (json) {
    PrintStatusJson(scan);
  } else {
    PrintStatusLines(scan, prune);
  }
  for (const auto& e : scan.errors) std::fprintf(stderr, "cusnap status: %s\n", e.c_str());
  return scan.errors.empty() ? kExitOk : kExitError;
}

}  // namespace cusnap::cli
