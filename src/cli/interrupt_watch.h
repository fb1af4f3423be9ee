// SIGINT and SIGTERM while `cusnap checkpoint` or `cusnap restore` runs: instead of dying
// half way (the default action), the command is asked to stop (coordinator/sequences/interrupt.h).
// Before its first destructive step it stops at the next phase boundary and undoes what it
// did; after it, it finishes, and the user is told so on stderr.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "coordinator/sequences/interrupt.h"

namespace cusnap::cli {

/// While alive: SIGINT and SIGTERM are blocked in this thread and every thread started after
/// it (the coordinator's phase threads), and a thread of its own takes them from a signalfd.
/// The first one asks `interrupt` to stop and says on stderr what will happen; later ones are
/// said to be ignored. Construct it before any other thread starts. Without descriptors for
/// it (EMFILE, ENOMEM) nothing is blocked and the signals keep their default action.
class InterruptWatch {
 public:
  /// `command`: "checkpoint" or "restore", for the messages.
  InterruptWatch(const char* command, coord::Interrupt& interrupt);
  /// Wakes the watching thread and joins it at once (it waits for a signal or for this, on
  /// no timer: a command that is done ends without a wait); from then on SIGINT and SIGTERM
  /// are ignored (one still pending is dropped: the command has ended and said how) and the
  /// signal mask is restored.
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;

  /// The first signal taken (SIGINT or SIGTERM), or 0.
  int signal() const { return first_.load(); }

 private:
  void Watch();
  void Tell(int signo);

  std::string command_;
  coord::Interrupt& interrupt_;
  std::atomic<int> first_{0};
  int signals_ = -1;  ///< signalfd of SIGINT and SIGTERM
  int wake_ = -1;     ///< eventfd the destructor writes to end the thread
  std::thread thread_;
};

/// "SIGINT", "SIGTERM" (the signals InterruptWatch takes), else "signal <n>".
std::string SignalName(int signo);

}  // namespace cusnap::cli
