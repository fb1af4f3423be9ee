// The state directory's owner check before a checkpoint (state_guard.h).
#include "coordinator/state_guard.h"

#include <sys/stat.h>

#include <algorithm>

#include "coordinator/proc.h"
#include "coordinator/state_file.h"

namespace cusnap::coord {

Status CheckStateDirOwner(const std::string& state_dir, const std::vector<ProcessIdentity>& job) {
  // No file there (or no directory: PrepareStateDir then says why it cannot be made): nothing
  // to lose.
  struct stat st {};
  if (::lstat(StateFilePath(state_dir).c_str(), &st) != 0) return Ok{};
  auto state = ReadStateFile(state_dir);
  if (!state) {
    return Error{-1, "state directory " + state_dir + " already holds a state file that " +
                         "cannot be read (" + state.error().message + "); it is not " +
                         "overwritten: move it away, or choose another --state-dir"};
  }
  // Processes of the recorded job that are not part of this checkpoint and still exist as the
  // same process: that job may still be checkpointed and need this file to be restored.
  std::string alive;
  size_t count = 0;
  for (const auto& p : state->participants) {
    const ProcessIdentity recorded{p.pid, p.start_time};
    if (std::find(job.begin(), job.end(), recorded) != job.end()) continue;
    const auto start = ProcessStartTime(p.pid);
    if (!start || *start != p.start_time) continue;
    alive += (alive.empty() ? "" : ", ") + std::to_string(p.pid);
    ++count;
  }
  if (alive.empty()) return Ok{};
  const std::string pids = (count == 1 ? "pid " : "pids ") + alive;
  return Error{-1, "state directory " + state_dir + " holds the checkpoint of another job (" +
                       pids + ", still checkpointed or running); restore it first, or choose " +
                       "another --state-dir"};
}

}  // namespace cusnap::coord
