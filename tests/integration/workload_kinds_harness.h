// Harness of the workload-kind tests (workload_kinds_test.cc): two workload_kinds_worker
// ranks started through the real `cusnap run` on the simulated driver, joined by a
// SOCK_SEQPACKET channel, driven line by line with bounded waits, and the real `cusnap`
// checkpoint / restore on the test's own process tree. Each test gets its own control
// directory and simulated machine (SIMCUDA_DIR). The test process never loads the driver: it
// is the root of the checkpointed tree.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace workload {

/// Bound on every wait for a worker's reply or a `cusnap` command (ms): generous, the suite
/// runs under ASan on a loaded 2-core machine.
inline constexpr int kWaitMs = 120'000;

/// One workload_kinds_worker process.
struct Rank {
  std::string name;
  pid_t pid = -1;  ///< -1 once reaped
  int in = -1;     ///< its stdin
  int out = -1;    ///< its stdout
  std::string pending;
};

/// A finished `cusnap` command.
struct Ran {
  int status = -1;  ///< exit status; -1 when killed or timed out
  std::string out, err;
  /// The --json report (null when the output was not JSON).
  nlohmann::json Report() const;
  /// Sum of the report's phase times, ms.
  double PhaseMs() const;
};

class WorkloadKindsTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  /// Starts rank a (device 0) and rank b (device 1) through `cusnap run`, joined by a
  /// channel on their descriptor 3; both answer "ready". `a_without_context`: rank a starts
  /// with no context at all (workload_kinds_worker's "nocontext").
  void StartRanks(bool a_without_context = false);
  /// Says "exit" to both ranks and reaps them (SIGKILL after kWaitMs); expects exit 0.
  void StopRanks();
  /// One command; returns the reply line ("<eof>" / "<timeout>" when none came).
  std::string Ask(Rank& r, const std::string& command);
  /// Asserts the reply starts with "ok" and returns the text after "ok " ("" when none).
  std::string Ok(Rank& r, const std::string& command);
  /// The same command to both ranks at once (they work concurrently); asserts both replies
  /// start with "ok" and returns the texts after "ok " (a's, b's).
  std::pair<std::string, std::string> OkBoth(const std::string& command);
  /// Runs the real `cusnap` (bounded), output captured.
  Ran Cusnap(const std::vector<std::string>& args);
  /// Rank `a` writes a word through its mapping (named `name_a` there) of an allocation that
  /// rank `b` maps as `name_b`, and b reads it; then the other way round.
  void CrossWrite(Rank& a, const std::string& name_a, Rank& b, const std::string& name_b,
                  uint32_t salt);
  /// `cusnap checkpoint --pid <this process> --json`, then `cusnap restore` (plus
  /// `restore_extra`), each must exit 0; returns both.
  std::pair<Ran, Ran> Cycle(const std::vector<std::string>& restore_extra = {});

  std::string dir_;
  Rank a_, b_;
};

}  // namespace workload
