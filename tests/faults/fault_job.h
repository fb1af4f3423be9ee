// The fault matrix's job and one case's run (tests/faults/): three job_worker processes on the
// simulated driver, started through `cusnap run` (the integration tests' JobTest harness),
// that share memory through tickets: A creates `a` (device 0) and shares it with B and C, B
// creates `b` (device 1) and shares it with A, C keeps a host allocation `c` of its own; every
// allocation (2 MiB) holds a known pattern; A and B form a multicast team (A creates it and
// binds `a` for device 0, B imports it and binds `b` for device 1; A maps it). A case runs `checkpoint` (or `restore` of a clean
// checkpoint) with the fault at a phase boundary (the CLI's pause knob, src/cli/test_pause.h),
// asks `status` what state the job is in, runs one recovery command, then reads every shared
// byte back in every survivor within a bound.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "fault_case.h"
#include "job_harness.h"

namespace faults {

/// How one case ended.
struct Verdict {
  unsigned long long bytes_lost = 0;  ///< bytes survivors created that do not read back
  unsigned stuck = 0;                 ///< processes (CLI or survivor) that did not answer
  std::vector<std::string> problems;  ///< what went wrong, one line each; empty: passed
  std::string recovery;               ///< the recovery command run ("" when none was needed)
};

/// Bound on a survivor's answer to a driver call after the recovery, ms: a healthy one comes
/// in milliseconds; a call that waits longer is stuck (the shim's gate holds it for 60 s).
inline constexpr int kAnswerMs = 5'000;

/// The CUresult an injected driver fault returns (CUDA_ERROR_OUT_OF_MEMORY).
inline constexpr int kInjectedResult = 2;

class FaultJob : public jobtest::JobTest {
 protected:
  void TearDown() override;

  /// Starts the three workers and builds the sharing (see above). With `call_log`, every
  /// worker logs its driver calls there (SIMCUDA_CALL_LOG).
  void BuildJob(const std::string& call_log = "");

  /// Runs `cusnap <command> --pid <us> --state-dir <state>` with CUSNAP_TEST_PAUSE_AT=`pause`
  /// and the variables in `env` set for the CLI only; at each pause, once the CLI has
  /// stopped, calls `at(cli pid, "<phase>:<when>")`, which continues it (or not).
  jobtest::Ran RunPaused(const std::string& command, const std::string& pause,
                         const std::map<std::string, std::string>& env,
                         const std::function<void(pid_t, const std::string&)>& at);

  /// The clean run of `command` with every boundary paused and every process's driver calls
  /// logged in `call_log` (BuildJob's): the phases and the calls each process made in each.
  CommandPlan RecordPlan(const std::string& command, const std::string& call_log);

  /// Runs `c` on the built job and judges it.
  Verdict RunCase(const Case& c);

  std::string state_dir_;
  std::map<std::string, jobtest::Worker*> by_name_;   ///< "A", "B", "C"
  std::map<std::string, std::string> creator_;        ///< allocation -> its creator's name
};

}  // namespace faults
