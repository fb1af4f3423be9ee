// The fault matrix's jobs and one case's run (tests/faults/).
//
// The workers job (checkpoint and restore cases): three job_worker processes on the simulated
// driver, started through `cusnap run` (the integration tests' JobTest harness), that share
// memory through tickets: A creates `a` (device 0) and shares it with B and C, B creates `b`
// (device 1) and shares it with A, C keeps a host allocation `c` of its own; every allocation
// (2 MiB) holds a known pattern; A and B form a multicast team (A creates it and binds `a` for
// device 0, B imports it and binds `b` for device 1; A maps it).
//
// The images job (dump and restore-images cases, when CRIU runs here): criu_job
// (tests/integration/criu_job.cc) under `cusnap run`, a root and a child that share a 2 MiB
// allocation of the root's and talk to nothing outside their tree, so CRIU can take them to
// disk; the child keeps a private allocation of its own.
//
// A case runs its command (restore cases on a clean checkpoint, restore-images cases on a
// clean dump) with the fault at a phase boundary (the CLI's pause knob, src/cli/test_pause.h),
// asks `status` (or `inspect` of the images, when the job is on disk) what state the job is
// in, runs one recovery command, then reads every shared byte back in every survivor within
// a bound.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <set>
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

  /// Starts the workers job (see above). With `call_log`, every worker logs its driver calls
  /// there (SIMCUDA_CALL_LOG).
  void BuildJob(const std::string& call_log = "");

  /// Starts the images job (see above) and waits until both processes are ready. With
  /// `call_log`, both log their driver calls there; `fault` is criu_job's CRIU_JOB_FAULT
  /// ("<role>:<entry>:<nth>:<result>"; "": none). Needs CRIU for anything after
  /// (criu_problem.h).
  void BuildImagesJob(const std::string& call_log = "", const std::string& fault = "");

  /// Runs `cusnap <command>` on the job built (CliArgs) with CUSNAP_TEST_PAUSE_AT=`pause`
  /// and the variables in `env` set for the CLI only; at each pause, once the CLI has
  /// stopped, calls `at(cli pid, "<phase>:<when>")`, which continues it (or not).
  jobtest::Ran RunPaused(const std::string& command, const std::string& pause,
                         const std::map<std::string, std::string>& env,
                         const std::function<void(pid_t, const std::string&)>& at);

  /// The clean run of `command` with every boundary paused and every process's driver calls
  /// logged in `call_log` (BuildJob's or BuildImagesJob's): the phases, the calls each
  /// process made in each, and the boundaries where the job's processes did not exist.
  CommandPlan RecordPlan(const std::string& command, const std::string& call_log);

  /// Runs `c` on the built job (BuildJob's, or BuildImagesJob's for dump and restore-images
  /// cases) and judges it.
  Verdict RunCase(const Case& c);

  /// The images job's part of RunCase once the fault happened: running in place, it is
  /// recovered as the workers job is (RecoverInPlace); gone, `inspect` must name its images
  /// and `restore --images-dir` bring it back. Then it checks its bytes (<job dir>/go): each
  /// survivor must answer within a bound, and every allocation whose creator is not `killed`
  /// (pid `killed_pid`) read back.
  void JudgeImagesJob(Verdict& v, const std::string& killed, pid_t killed_pid);

  std::string state_dir_;
  std::map<std::string, jobtest::Worker*> by_name_;   ///< "A", "B", "C"
  std::map<std::string, std::string> creator_;        ///< allocation -> its creator's name

 private:
  /// The `cusnap` arguments that run `command` on the job built.
  std::vector<std::string> CliArgs(const std::string& command) const;
  /// The job's processes by name, alive or not (the images job's keep their pids on disk).
  std::map<std::string, pid_t> JobPids() const;
  /// The images job's processes that exist now (zombies of ours reaped first).
  std::map<std::string, pid_t> LiveImagesJob();
  /// `status` names every process of `live`; runs the one command their states call for
  /// (none when all are active; `restore` when all are released and `killed_pid`, which
  /// died, was not in the checkpoint; `recover --all` otherwise), recorded in v.recovery;
  /// then each must be active. Returns what the recovery command (or, when none ran,
  /// `status`) printed.
  std::string RecoverInPlace(Verdict& v, const std::map<std::string, pid_t>& live,
                             pid_t killed_pid);
  /// Every process of `live` is active now, as `status` says (a problem for each one not).
  void ExpectActive(Verdict& v, const std::map<std::string, pid_t>& live);

  std::string images_job_dir_;  ///< criu_job's <dir> (its go file); "" without an images job
  std::string images_log_;      ///< its stdout and stderr
  std::map<std::string, pid_t> images_pids_;  ///< "root", "child"
};

}  // namespace faults
