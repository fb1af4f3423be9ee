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
#include "coordinator/record/records.h"
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

/// Removes the stale endpoint sockets of `stale`, hold markers and start-time aliases that
/// are still stale now (checked again just before each unlink: a live endpoint is never
/// removed). Returns the paths removed; failures go to `errors`.
std::vector<std::string> Prune(const std::string& control_dir,
                               const std::vector<StaleEndpoint>& stale,
                               const std::vector<std::string>& stale_markers,
                               const std::vector<std::string>& stale_aliases,
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
  return removed;
}

nlohmann::json OtherNamespacesJson(const std::vector<ForeignEndpoint>& foreign) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : foreign) {
    list.push_back({{"path", f.path}, {"pid_there", f.pid_there}, {"pid_here", f.pid_here}});
  }
  return list;
}

}  // namespace

int StatusCommand(const Target& target, bool json, bool prune) {
  const std::string control_dir = ControlDir();
  std::vector<int> pids;
  std::vector<StaleEndpoint> stale;  // listed, never an error; removed with --prune
  std::vector<std::string> stale_markers;  // hold markers of processes that ended held, too
  std::vector<std::string> stale_aliases;  // start-time aliases of restored processes that ended
  std::vector<ForeignEndpoint> foreign;  // endpoints of jobs in PID namespaces of their own
  if (target.pid > 0) {
    if (const std::string problem = CheckTargetPid(target.pid, control_dir); !problem.empty()) {
      std::fprintf(stderr, "cusnap status: %s\n", problem.c_str());
      return kExitError;
    }
    pids = coord::EndpointPidsInTree(control_dir, target.pid);
  } else {
    if (const std::string problem = CheckControlDirReadable(control_dir); !problem.empty()) {
      std::fprintf(stderr, "cusnap status: %s\n", problem.c_str());
      return kExitError;
    }
    stale = StaleEndpoints(control_dir);
    stale_markers = coord::StaleHoldMarkersBelow(control_dir);
    stale_aliases = coord::StaleRestoredAliases(control_dir);
    foreign = ForeignEndpoints(control_dir);
    for (int pid : coord::EndpointPids(control_dir)) {
      const bool reused = std::any_of(stale.begin(), stale.end(),
                                      [&](const StaleEndpoint& s) { return !s.job_dir && s.pid == pid; });
      if (!reused) pids.push_back(pid);
    }
  }
  std::vector<std::string> errors;
  const std::vector<std::string> removed = prune ? Prune(control_dir, stale, stale_markers, stale_aliases, errors)
                                                 : std::vector<std::string>{};
  std::vector<std::unique_ptr<coord::Participant>> participants;
  for (int pid : pids) participants.push_back(coord::ConnectEndpoint(control_dir, pid));
  const auto entries = coord::CollectStatus(participants, errors);
  // Nobody here: where the user's cusnap processes are instead (another CUSNAP_CONTROL_DIR
  // or XDG_RUNTIME_DIR), rather than "no participants" alone.
  const auto elsewhere = entries.empty() && target.pid <= 0
                             ? coord::OtherShimControlDirs(control_dir)
                             : std::map<std::string, std::vector<int>>{};

  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries) {
      if (!e.unreachable.empty()) {
        list.push_back({{"pid", e.identity.pid},
                        {"start_time", e.identity.start_time},
                        {"phase", "unreachable"},
                        {"unreachable", e.unreachable}});
        continue;
      }
      list.push_back({{"pid", e.identity.pid},
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
                      {"shim", ShimBuildInfoInFile(coord::MappedShimPath(e.identity.pid))}});
    }
    nlohmann::json stale_list = nlohmann::json::array(), stale_reasons = nlohmann::json::object();
    for (const auto& st : stale) {
      stale_list.push_back(st.path);
      stale_reasons[st.path] = StaleReason(st);
    }
    std::printf("%s\n", nlohmann::json{{"control_dir", control_dir},
                                       {"participants", list},
                                       {"stale_endpoints", stale_list},
                                       {"stale_reasons", stale_reasons},
                                       {"stale_hold_markers", stale_markers},
                                       {"stale_restored_aliases", stale_aliases},
                                       {"other_pid_namespaces", OtherNamespacesJson(foreign)},
                                       {"other_control_dirs", elsewhere},
                                       {"pruned", removed},
                                       {"errors", errors}}.dump(2).c_str());
  } else {
    std::printf("control dir: %s\n", control_dir.c_str());
    struct stat dir_stat {};
    if (entries.empty()) {
      std::printf("no participants%s\n", ::stat(control_dir.c_str(), &dir_stat) == 0
                                              ? "" : " (the control directory does not exist)");
    }
    for (const auto& [dir, dir_pids] : elsewhere) {
      std::printf("cusnap processes in another control directory: %s (pid %s): run "
                  "'CUSNAP_CONTROL_DIR=%s cusnap status'\n", dir.c_str(),
                  coord::PidListText(dir_pids).c_str(), dir.c_str());
    }
    for (const auto& e : entries) {
      if (!e.unreachable.empty()) {
        std::printf("pid %-8d %-20s %-12s its endpoint did not answer (its error line on stderr says why)\n",
                    e.identity.pid, coord::ProcessName(e.identity.pid).c_str(), "unreachable");
        continue;
      }
      const std::string state = coord::Lowercase(proto::ShimStateName(e.identity.state));
      if (!e.held.empty()) {
        std::printf("pid %-8d %-20s %-12s %s\n", e.identity.pid,
                    coord::ProcessName(e.identity.pid).c_str(), state.c_str(), e.held.c_str());
        continue;
      }
      std::printf("pid %-8d %-20s %-12s %zu allocations (%zu created)  %zu mappings  %s tracked",
                  e.identity.pid, coord::ProcessName(e.identity.pid).c_str(), state.c_str(),
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
      const std::string shim = ShimBuildInfoInFile(coord::MappedShimPath(e.identity.pid));
      std::printf("    shim: %s\n", shim.empty() ? "unknown (its library file cannot be read)"
                                                    : shim.c_str());
    }
    for (const auto& st : stale) {
      const bool gone = std::find(removed.begin(), removed.end(), st.path) != removed.end();
      std::printf("stale endpoint %s: %s (%s)\n", st.path.c_str(), StaleReason(st).c_str(),
                  gone ? "removed" : "safe to remove");
    }
    for (const auto& f : foreign) {
      std::printf("endpoint %s: pid %d of a job in a PID namespace of its own, pid %d here: "
                  "see 'cusnap status --pid %d'\n", f.path.c_str(), f.pid_there, f.pid_here,
                  f.pid_here);
    }
    for (const auto& marker : stale_markers) {
      const bool gone = std::find(removed.begin(), removed.end(), marker) != removed.end();
      std::printf("stale hold marker %s: its process ended while held (%s)\n", marker.c_str(),
                  gone ? "removed" : "safe to remove");
    }
    for (const auto& alias : stale_aliases) {
      const bool gone = std::find(removed.begin(), removed.end(), alias) != removed.end();
      std::printf("stale start-time alias %s: the restored process it names ended (%s)\n",
                  alias.c_str(), gone ? "removed" : "safe to remove");
    }
    // A `cusnap dump` leaves both behind when it takes a held job away; its images are what
    // a restore needs, not these files.
    if (!stale_markers.empty() && !prune) {
      std::printf("(a job `cusnap dump` took to disk leaves these too: 'cusnap restore "
                  "--images-dir <dir>' brings it back from its images, with or without them)\n");
    }
  }
  for (const auto& e : errors) std::fprintf(stderr, "cusnap status: %s\n", e.c_str());
  return errors.empty() ? kExitOk : kExitError;
}

}  // namespace cusnap::cli
