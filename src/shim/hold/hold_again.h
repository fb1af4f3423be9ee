// When a checkpointed process whose command died is held again (lifecycle.h, "The hold after
// a command"): from release to activate, once no request came for a lease since the last
// activity (a request's start or end, or a continue seen), the process stops itself again
// (HoldThisProcess, hold_guard.h). A continue is seen as a watcher tick that comes late: while
// armed the watcher ticks every HoldTickNs, and a tick HoldGapNs later than planned means the
// process was stopped in between, so whoever continued it gets a whole lease to send its
// first request.
#pragma once

#include <cstdint>
#include <optional>

namespace cusnap::shim {

/// The hold's grace when no request gave a lease: how long a held process runs with no
/// command at work before it stops itself again (ms).
inline constexpr uint64_t kDefaultHoldGraceMs = 10'000;

/// The hold-again timing of one process. Not thread-safe: its owner (the lease watch,
/// lease_watch.h) guards it. Times are MonotonicNs; `lease_ns` is the command's lease in ns
/// (0: none was given).
class HoldAgainClock {
 public:
  /// Arms (release with `held`) or disarms (activate) the hold; either is activity.
  void Arm(bool armed, uint64_t now_ns);
  bool armed() const { return armed_; }
  /// A request started or ended.
  void NoteActivity(uint64_t now_ns) { activity_ns_ = now_ns; }
  /// When the watcher means to wake next (0: no bound), so that a late tick is seen.
  void NotePlannedWake(uint64_t wake_ns) { planned_wake_ns_ = wake_ns; }
  /// Notes a continue (a tick HoldGapNs later than planned) and says whether the hold is due:
  /// armed, no request running, and none for HoldGraceNs since the last activity.
  bool Due(uint64_t now_ns, uint64_t lease_ns, bool request_running);
  /// The hold, re-checked under the owner's run lock right before it is done: the ns the
  /// process ran with no command at work when it is still due (that moment becomes the last
  /// activity); nullopt when a request came meanwhile or the hold was disarmed.
  std::optional<uint64_t> Take(uint64_t now_ns, uint64_t lease_ns, bool request_running);

  /// The grace: the lease, else kDefaultHoldGraceMs.
  static uint64_t GraceNs(uint64_t lease_ns);
  /// How late a tick must be to say the process was stopped in between: an eighth of the
  /// grace, within [50 ms, 1 s]. A stop this short goes unseen, and the lease left to a
  /// command that just continued the process is then still 0.75 - 3/16 of it (a renewal
  /// comes every quarter lease, the tick is half the gap).
  static uint64_t GapNs(uint64_t lease_ns);
  /// How often the watcher ticks while armed: half the gap.
  static uint64_t TickNs(uint64_t lease_ns) { return GapNs(lease_ns) / 2; }

 private:
  bool armed_ = false;
  uint64_t activity_ns_ = 0;      // last request start or end, continue seen, or arming
  uint64_t planned_wake_ns_ = 0;  // when the watcher meant to wake (0: no bound)
};

}  // namespace cusnap::shim
