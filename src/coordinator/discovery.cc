// Participant discovery over /proc and the control directory (coordinator.h).
#include <unistd.h>

#include "coordinator/coordinator.h"
#include "common/control_dir.h"
#include "common/text.h"
#include "coordinator/participants/hold.h"
#include "coordinator/proc/processes.h"
#include "coordinator/participants/endpoints.h"

namespace cusnap::coord {
namespace {

/// A held process (hold.h) is stopped: its endpoint cannot answer, and it is checkpointed
/// already. Said at once, rather than after the endpoint's deadline.
Error HeldRefusal(int pid) {
  return Error{-1, ProcessText(pid, ProcessName(pid)) + " is held: checkpointed and stopped " +
                       "by 'cusnap checkpoint' until 'cusnap restore' continues it; restore it " +
                       "first"};
}

/// A process stopped by someone else (StoppedProcessText).
Error StoppedRefusal(const std::string& control_dir, int pid, char state) {
  // No "nothing was changed" here: a roll forward discovers too, after the job was changed;
  // the command's last line says what it changed.
  const std::string why = StoppedProcessText(control_dir, pid, state);
  return Error{-1, why + (RestoredUnfinished(control_dir, pid) ? "" : " and try again")};
}

Result<std::vector<std::unique_ptr<Participant>>> DiscoverTree(const DiscoveryOptions& options,
                                                               CheckpointDriver& driver) {
  const std::vector<int> tree = ProcessTree(options.pid);
  if (tree.empty()) return Error{ESRCH, ProcessText(options.pid) + " does not exist"};
  std::vector<std::unique_ptr<Participant>> participants;
  for (int pid : tree) {
    if (pid == ::getpid()) continue;  // the coordinator itself (it loaded the driver too)
    if (ProcessExited(pid)) continue;  // a zombie: nothing of it runs, nothing to save
    if (IsHeld(options.control_dir, pid)) return HeldRefusal(pid);
    if (HasEndpoint(options.control_dir, pid)) {
      if (const auto state = StoppedState(pid)) {
        return StoppedRefusal(options.control_dir, pid, *state);
      }
      participants.push_back(ConnectEndpoint(options.control_dir, pid));
      continue;
    }
    // A process whose shim serves its endpoint in another control directory is a
    // participant there: said before the driver is asked, whose answer waits for a process
    // that is stopped (held by a checkpoint: a restore from a shell with another
    // XDG_RUNTIME_DIR would wait for ever). A process the driver knows (any
    // checkpoint state) is a CUDA process; without an endpoint its sharing is unknown, so
    // nothing may change.
    const auto shim_dir = ShimControlDir(pid);
    const bool served_elsewhere = shim_dir && *shim_dir != options.control_dir;
    if (served_elsewhere || driver.GetState(pid).ok()) {
      const std::string elsewhere = ShimElsewhere({pid}, options.control_dir);
      return Error{-1, ProcessText(pid, ProcessName(pid)) +
                           ": a CUDA process in the tree of " + ProcessText(options.pid) +
                           " has no cusnap endpoint in " + options.control_dir + "; " +
                           (elsewhere.empty() ? "start it with 'cusnap run'" : elsewhere)};
    }
  }
  if (participants.empty()) {
    return Error{-1, NoEndpointInTreeText(options.pid, tree, options.control_dir)};
  }
  return participants;
}

Result<std::vector<std::unique_ptr<Participant>>> DiscoverAll(const DiscoveryOptions& options) {
  std::vector<std::unique_ptr<Participant>> participants;
  for (int pid : EndpointPids(options.control_dir)) {
    if (IsHeld(options.control_dir, pid)) return HeldRefusal(pid);
    if (const auto state = StoppedState(pid)) {
      return StoppedRefusal(options.control_dir, pid, *state);
    }
    participants.push_back(ConnectEndpoint(options.control_dir, pid));
  }
  if (participants.empty()) {
    std::string none = "no live cusnap endpoint in " + options.control_dir;
    if (const std::string elsewhere = OtherShimControlDirsText(options.control_dir);
        !elsewhere.empty()) {
      none += "; ";
      none += elsewhere;
    }
    return Error{-1, none};
  }
  return participants;
}

}  // namespace

Discoverer EndpointDiscoverer(DiscoveryOptions options) {
  return [options](CheckpointDriver& driver) -> Result<std::vector<std::unique_ptr<Participant>>> {
    // Endpoints in a directory someone else controls may be fakes: talk to none of them.
    if (const std::string unsafe = UnsafeControlDir(options.control_dir); !unsafe.empty()) {
      return Error{EPERM, unsafe};
    }
    return options.all ? DiscoverAll(options) : DiscoverTree(options, driver);
  };
}

}  // namespace cusnap::coord
