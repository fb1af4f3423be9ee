// How `cusnap` shows a command's phases: one line per phase (name, elapsed ms,
// participants, bytes, GB/s), a phase-level progress bar on a terminal, and the same data as
// one JSON document for --json.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "coordinator/coordinator.h"

namespace cusnap::cli {

/// "1.50 GiB", "512 B", ... (binary units).
std::string FormatBytes(uint64_t bytes);

/// `save        12.3 ms  2 participants  1.50 GiB  121.9 GB/s` (bytes and GB/s only when
/// the phase moved bytes; GB/s = 1e9 bytes per second of the phase's wall time). A phase
/// with a note says "(<note>)" instead of the participant count ("multicast_create  0.1 ms
/// (no multicast objects)"); a coordinator-only phase (read_state, write_state) says neither.
std::string FormatPhaseLine(const coord::PhaseReport& phase);

/// The phase as JSON: name, elapsed_ms, participants, coordinator_only, bytes, gb_per_s,
/// note ("" for none), errors.
nlohmann::json PhaseToJson(const coord::PhaseReport& phase);

/// Prints phase lines as phases finish (unless quiet, for --json); while a phase runs and
/// `tty` is set, a bar "[#####     ] 4/10 save" is drawn on the same line and replaced by
/// the phase's line when it ends. In phases that move bytes (save, reallocate) the bar is
/// redrawn as each participant finishes, filled by bytes: "[###    ] save 1.00 GiB / 3.00 GiB".
class PhasePrinter final : public coord::PhaseObserver {
 public:
  PhasePrinter(std::FILE* out, bool quiet, bool tty, size_t total_phases)
      : out_(out), quiet_(quiet), tty_(tty), total_(total_phases) {}
  void PhaseStarted(const std::string& name, size_t participants) override;
  void PhaseFinished(const coord::PhaseReport& report) override;
  void BytesMoved(const std::string& name, uint64_t done, uint64_t total) override;
  /// "-- <text>" on a line of its own.
  void Remark(const std::string& text) override;

 private:
  /// Draws "[<filled of 20>] <text>" over the current line (terminal only).
  void DrawBar(size_t filled, const std::string& text);
  std::mutex mu_;  // BytesMoved comes from the participants' threads
  std::FILE* out_;
  bool quiet_;
  bool tty_;
  size_t total_;
  size_t done_ = 0;
};

/// The JSON document of a command that ended before any phase ran (a usage error, a bad
/// target): the keys of ReportToJson's, with no phases, so a script reads every answer the
/// same way. outcome "restore_refused" for exit 5, else "refused".
nlohmann::json UntouchedToJson(const std::string& command, int exit_code,
                               const std::vector<std::string>& errors);

/// The whole report as one JSON document (--json). A coordinator-only phase's participants
/// is the command's participant count (the largest phase count), like every other phase's.
nlohmann::json ReportToJson(const std::string& command, const std::string& driver,
                            const coord::CommandReport& report, int exit_code);

}  // namespace cusnap::cli
