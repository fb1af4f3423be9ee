// A test-only pause at the phase boundaries of `cusnap checkpoint` and `cusnap restore`, for
// the fault matrix (tests/faults/): with CUSNAP_TEST_PAUSE_AT=<command>:<phase>:<when> in the
// CLI's environment, the CLI writes the line
//   cusnap-test-pause: <command>:<phase>:<when>
// on stderr at that boundary and stops itself with SIGSTOP, so that a harness can deliver
// SIGINT or SIGKILL to it, kill a participant, or arm a driver fault at exactly that moment,
// and then send SIGCONT (or SIGKILL). <phase> is the name a phase line shows (the stage lists
// of checkpoint.cc and restore.cc, as they run; a rollback's `resume` too) or `*` for every
// phase; <when> is `before` (the phase has started: its interrupt check is done, none of its
// work is), `after` (its work is done and its line printed; the next stage's interrupt check
// follows) or `*`. Several patterns may be given, comma-separated. Without the variable
// nothing is wrapped: the observer the command uses is the printer itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/participants/phase_runner.h"

namespace cusnap::cli {

/// Forwards every call to `inner`, then pauses (line on stderr, SIGSTOP) at each boundary a
/// pattern names.
class TestPauseObserver final : public coord::PhaseObserver {
 public:
  /// `patterns`: "<command>:<phase>:<when>" items as CUSNAP_TEST_PAUSE_AT gives them.
  TestPauseObserver(std::string command, const std::string& patterns, coord::PhaseObserver& inner);
  void PhaseStarted(const std::string& name, size_t participants) override;
  void PhaseFinished(const coord::PhaseReport& report) override;
  void BytesMoved(const std::string& name, uint64_t done, uint64_t total) override;
  void Remark(const std::string& text) override { inner_.Remark(text); }

 private:
  void MaybePause(const std::string& phase, const char* when);

  std::string command_;
  std::vector<std::string> patterns_;
  coord::PhaseObserver& inner_;
};

/// `inner` itself when CUSNAP_TEST_PAUSE_AT is unset or empty (the normal case: no cost);
/// otherwise a TestPauseObserver around it, kept in `holder`.
coord::PhaseObserver& WithTestPause(const char* command, coord::PhaseObserver& inner,
                                    std::unique_ptr<coord::PhaseObserver>& holder);

}  // namespace cusnap::cli
