// Participant discovery over /proc and the control directory (coordinator.h).
#include <unistd.h>

#include "coordinator/coordinator.h"
#include "common/text.h"
#include "coordinator/proc.h"

namespace cusnap::coord {
namespace {

Result<std::vector<std::unique_ptr<Participant>>> DiscoverTree(const DiscoveryOptions& options,
                                                               CheckpointDriver& driver) {
  const std::vector<int> tree = ProcessTree(options.pid);
  if (tree.empty()) return Error{ESRCH, ProcessText(options.pid) + " does not exist"};
  std::vector<std::unique_ptr<Participant>> participants;
  for (int pid : tree) {
    if (pid == ::getpid()) continue;  // the coordinator itself (it loaded the driver too)
    if (HasEndpoint(options.control_dir, pid)) {
      participants.push_back(ConnectEndpoint(options.control_dir, pid));
      continue;
    }
    // A process the driver knows (any checkpoint state) is a CUDA process; without an
    // endpoint its sharing is unknown, so nothing may change.
    if (driver.GetState(pid).ok()) {
      return Error{-1, ProcessText(pid, ProcessName(pid)) +
                           ": a CUDA process in the tree of " + ProcessText(options.pid) +
                           " has no cusnap endpoint in " + options.control_dir +
                           "; start it with 'cusnap run' (nothing was changed)"};
    }
  }
  if (participants.empty()) {
    return Error{-1, ProcessText(options.pid) + ": no process in its tree has a " +
                         "cusnap endpoint in " + options.control_dir +
                         "; start the job with 'cusnap run'"};
  }
  return participants;
}

Result<std::vector<std::unique_ptr<Participant>>> DiscoverAll(const DiscoveryOptions& options) {
  std::vector<std::unique_ptr<Participant>> participants;
  for (int pid : EndpointPids(options.control_dir)) {
    participants.push_back(ConnectEndpoint(options.control_dir, pid));
  }
  if (participants.empty()) {
    return Error{-1, "no live cusnap endpoint in " + options.control_dir};
  }
  return participants;
}

}  // namespace

Discoverer EndpointDiscoverer(DiscoveryOptions options) {
  return [options](CheckpointDriver& driver) {
    return options.all ? DiscoverAll(options) : DiscoverTree(options, driver);
  };
}

}  // namespace cusnap::coord
