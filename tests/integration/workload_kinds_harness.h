// Harness of the workload-kind tests (workload_kinds_test.cc): a job of N ranks (the test's
// parameter: 2, or 8 for the scale runs), each a workload_kinds_worker on its own
// simulated device (SIMCUDA_DEVICE_COUNT = N), started through the real `cusnap run`, joined
// in a ring of SOCK_SEQPACKET channels (rank r to rank r+1), driven line by line with bounded
// waits, and the real `cusnap` checkpoint / restore on the test's own process tree. Each test
// gets its own control directory and simulated machine (SIMCUDA_DIR). The test process never
// loads the driver: it is the root of the checkpointed tree.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
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

/// The fixture; its parameter is the number of ranks (and simulated devices), at least 2.
class WorkloadKindsTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override;
  void TearDown() override;

  /// How many ranks the job has (the parameter).
  int Ranks() const { return GetParam(); }
  /// Rank r modulo the rank count (so R(r + 1) is r's next rank, R(r - 1) its previous).
  Rank& R(int r);
  /// Starts rank r on device r for every r through `cusnap run`, rank r's descriptor 3 joined
  /// to rank r+1's descriptor 4; each answers "ready". `even_without_context`: the even ranks
  /// start with no context at all (workload_kinds_worker's "nocontext").
  void StartRanks(bool even_without_context = false);
  /// Says "exit" to every rank and reaps it (SIGKILL after kWaitMs); expects exit 0.
  void StopRanks();
  /// One command; returns the reply line ("<eof>" / "<timeout>" when none came).
  std::string Ask(Rank& r, const std::string& command);
  /// Asserts the reply starts with "ok" and returns the text after "ok " ("" when none).
  std::string Ok(Rank& r, const std::string& command);
  /// command(r) to every rank r at once (they work concurrently); asserts every reply starts
  /// with "ok" and returns the texts after "ok ", by rank.
  std::vector<std::string> OkAll(const std::function<std::string(int)>& command);
  /// The same command to every rank at once (OkAll).
  std::vector<std::string> OkAll(const std::string& command);
  /// The --device-map that rotates the job by one device: "0=1,1=2,...,N-1=0" (with two
  /// ranks, the swap "0=1,1=0").
  std::string RotatedDeviceMap() const;
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
  std::vector<Rank> ranks_;  ///< sized once by StartRanks: references stay valid
};

}  // namespace workload
