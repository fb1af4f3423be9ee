// `cusnap status`: every participant's identity, phase and table counts (read-only; the
// driver is not loaded, so status works whatever state the job is in), and, for the whole
// control directory, the stale endpoint sockets of processes that no longer exist.
#include <cstdio>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "common/text.h"
#include "coordinator/coordinator.h"
#include "coordinator/proc.h"
#include "coordinator/records.h"

namespace cusnap::cli {
int StatusCommand(const Target& target, bool json) {
  const std::string control_dir = ControlDir();
  std::vector<int> pids;
  std::vector<std::string> stale;  // sockets of dead processes: listed, never an error
  if (target.pid > 0) {
    if (!coord::ProcessStartTime(target.pid)) {
      std::fprintf(stderr, "cusnap status: %s does not exist\n", ProcessText(target.pid).c_str());
      return kExitError;
    }
    pids = coord::EndpointPidsInTree(control_dir, target.pid);
  } else {
    pids = coord::EndpointPids(control_dir);
    for (int pid : coord::StaleEndpointPids(control_dir)) {
      stale.push_back(EndpointPath(control_dir, pid));
    }
  }
  std::vector<std::unique_ptr<coord::Participant>> participants;
  for (int pid : pids) participants.push_back(coord::ConnectEndpoint(control_dir, pid));
  std::vector<std::string> errors;
  const auto entries = coord::CollectStatus(participants, errors);

  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries) {
      list.push_back({{"pid", e.identity.pid},
                      {"start_time", e.identity.start_time},
                      {"phase", coord::PhaseName(e.identity.phase)},
                      {"allocations", e.allocations},
                      {"created", e.created},
                      {"mappings", e.mappings},
                      {"untracked_imports", e.identity.untracked_imports},
                      {"tracked_bytes", e.identity.tracked_bytes},
                      {"created_total", e.identity.created_total},
                      {"created_host_numa", e.identity.created_host_numa},
                      {"failure", e.identity.failure},
                      {"inspect_error", e.inspect_error}});
    }
    std::printf("%s\n", nlohmann::json{{"control_dir", control_dir},
                                       {"participants", list},
                                       {"stale_endpoints", stale},
                                       {"errors", errors}}.dump(2).c_str());
  } else {
    std::printf("control dir: %s\n", control_dir.c_str());
    if (entries.empty()) std::printf("no participants\n");
    for (const auto& e : entries) {
      std::printf("pid %-8d %-20s %-12s %zu allocations (%zu created)  %zu mappings  %s tracked",
                  e.identity.pid, coord::ProcessName(e.identity.pid).c_str(),
                  coord::PhaseName(e.identity.phase).c_str(), e.allocations, e.created,
                  e.mappings, FormatBytes(e.identity.tracked_bytes).c_str());
      std::printf("  %u tracked creates over its life (%u HOST_NUMA)", e.identity.created_total,
                  e.identity.created_host_numa);
      if (e.identity.untracked_imports > 0) {
        std::printf("  %llu untracked imports",
                    static_cast<unsigned long long>(e.identity.untracked_imports));
      }
      std::printf("\n");
      if (!e.identity.failure.empty()) std::printf("    failure: %s\n", e.identity.failure.c_str());
      if (!e.inspect_error.empty()) std::printf("    inspect: %s\n", e.inspect_error.c_str());
    }
    for (const auto& path : stale) {
      std::printf("stale endpoint %s: its process no longer exists (safe to remove)\n",
                  path.c_str());
    }
  }
  for (const auto& e : errors) std::fprintf(stderr, "cusnap status: %s\n", e.c_str());
  return errors.empty() ? kExitOk : kExitError;
}

}  // namespace cusnap::cli
