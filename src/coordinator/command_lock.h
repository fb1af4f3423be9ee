// One cusnap command at a time per participant: a `restore` run while a `checkpoint` is still
// at work would restore the job between the checkpoint's release and its native checkpoint;
// the checkpoint would then go on, and no command could bring the job back.
//
// Every command that changes a job locks each participant's command lock, the file
// "<its endpoint socket>.lock" beside the endpoint (flock, exclusive, never waited for),
// right after discovering it and before changing anything, and keeps it until the command
// ends: a second command on any of its processes is refused before it changes anything. The
// kernel drops the lock of a command that dies (kill -9), so a lock never outlives its
// command. Commands nested in one process (a dump's checkpoint and restore, a restore that
// recovers) share the locks their process holds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// A command lock held by this process; dropped when the last handle of it goes.
class CommandLock {
 public:
  /// Locks "<endpoint>.lock" (created 0600 when missing), or shares the lock this process
  /// holds on it already. Error EBUSY naming `who` when another process holds it ("<who> is
  /// in the middle of another cusnap command ..."), or the errno of the failed open.
  static Result<std::shared_ptr<CommandLock>> Take(const std::string& endpoint, const std::string& who);

  ~CommandLock();
  CommandLock(const CommandLock&) = delete;
  CommandLock& operator=(const CommandLock&) = delete;

 private:
  CommandLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

/// The command locks in `dir` that are left over: their endpoint socket is gone (the process
/// ended; a crashed one's socket goes with `status --prune`) and no command holds them.
std::vector<std::string> StaleCommandLocks(const std::string& dir);

}  // namespace cusnap::coord
