// A request from outside a running command (the CLI's SIGINT and SIGTERM handling) to stop
// it. The command is a transaction until its first destructive step: a stop asked for before
// that step takes effect at the next phase boundary, where the sequence undoes what it did
// (every participant resumed) and ends; once the sequence has committed to its first
// destructive step, no request stops it and it finishes, so the job is never left half way.
#pragma once

#include <atomic>

namespace cusnap::coord {

/// Shared by the thread that asks (a signal-watching thread) and the sequence that obeys.
/// Thread-safe; the decision between stopping and finishing is taken exactly once.
class Interrupt {
 public:
  /// What a Request() will lead to.
  enum class Answer {
    kWillStop,    ///< nothing destructive happened: the command stops at the next boundary
    kWillFinish,  ///< the command passed its first destructive step: it finishes
    kAgain,       ///< asked before: this request changes nothing
  };

  /// Asks the command to stop (any thread).
  Answer Request() {
    int seen = kRunning;
    if (state_.compare_exchange_strong(seen, kStopAsked)) return Answer::kWillStop;
    if (seen == kCommitted && !finish_told_.exchange(true)) return Answer::kWillFinish;
    return Answer::kAgain;
  }

  /// The sequence, at a phase boundary before a step that changes nothing for good: true
  /// when a stop was asked for (the sequence undoes its work and ends).
  bool StopAsked() const { return state_.load() == kStopAsked; }

  /// The sequence, before its first destructive step: false when a stop was asked for first
  /// (the sequence stops instead); true when it goes on, and from then on it finishes.
  bool Commit() {
    int seen = kRunning;
    return state_.compare_exchange_strong(seen, kCommitted) || seen == kCommitted;
  }

 private:
  static constexpr int kRunning = 0;
  static constexpr int kStopAsked = 1;
  static constexpr int kCommitted = 2;
  std::atomic<int> state_{kRunning};
  std::atomic<bool> finish_told_{false};
};

}  // namespace cusnap::coord
