// Runs one coordinator phase across participants: the work for every participant runs
// concurrently (one thread each) and the phase ends when all of them have finished, so each
// phase is a barrier (DESIGN.md, "Lifecycle": "Each arrow is a barrier").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace cusnap::coord {

/// What one phase did. elapsed in milliseconds (wall clock, start of the first thread to end
/// of the last); bytes summed over participants.
struct PhaseReport {
  std::string name;
  double elapsed_ms = 0;
  size_t participants = 0;
  uint64_t bytes = 0;
  /// Carrier phases (save, reallocate): the slowest participant's copy time in ns, without
  /// host registration and provisioning, so the copy rate can sit beside a pinned-copy
  /// baseline (DRIVER-FACTS "Speeds"); 0 for other phases.
  uint64_t copy_ns = 0;
  uint64_t zero_bytes = 0;  ///< of `bytes`, all-zero chunks the carriers skipped
  /// Done by the coordinator alone (read_state, write_state): lines show no participant
  /// count (read_state runs before any participant is known).
  bool coordinator_only = false;
  /// Said on the phase's line instead of the participant count, e.g. kNoMulticastNote
  /// (records.h) on the multicast phases of a job without multicast objects; "" for none.
  std::string note;
  std::vector<std::string> errors;  ///< one message per failed participant, in index order
  std::vector<int> error_codes;     ///< each of `errors`' Error::code
  bool ok() const { return errors.empty(); }
};

/// Told about phases as they start and finish (the CLI prints lines and a progress bar).
class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void PhaseStarted(const std::string& name, size_t participants) {
    (void)name;
    (void)participants;
  }
  virtual void PhaseFinished(const PhaseReport& report) { (void)report; }
  /// In a phase that moves bytes known in advance (save, reallocate: the INSPECT records
  /// say how many), called as each participant finishes, from that participant's thread:
  /// `done` of `total` bytes have moved.
  virtual void BytesMoved(const std::string& name, uint64_t done, uint64_t total) {
    (void)name;
    (void)done;
    (void)total;
  }
  /// Something the user must read now, between the phase lines: the command goes on as
  /// another one (a restore that recovers, whose phase names repeat), or it waits for a
  /// process that cannot go on (stopped while the driver works on it). Called from any
  /// thread.
  virtual void Remark(const std::string& text) { (void)text; }
};

/// Per-participant work: returns the bytes it moved, or an Error whose message names the
/// process and resource.
using PhaseWork = std::function<Result<uint64_t>(size_t index)>;

/// Runs `work(0..count-1)` on `count` threads, joins them all (the barrier) and reports.
/// `count` 0 runs nothing. Exceptions escaping `work` become errors of that participant.
PhaseReport RunPhase(const std::string& name, size_t count, const PhaseWork& work);

/// A phase done by the coordinator itself (no per-participant threads), timed the same way.
PhaseReport RunLocalPhase(const std::string& name, size_t participants,
                          const std::function<Result<uint64_t>()>& work);

}  // namespace cusnap::coord
