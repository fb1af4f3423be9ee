// The CLI integration tests' harness: starts job_worker processes (through the real
// `cusnap run`, or bare), drives them line by line over pipes with bounded waits, relays
// shareable descriptors between them, runs the real `cusnap` binary, and remembers the job's
// topology (allocations, their pattern seeds, views) so that every byte and every VA of every
// process can be checked after a restore. Each test gets its own control directory and
// simulated machine (SIMCUDA_DIR), so `--all` and cuMemGetInfo see only this test's job.
// The test process itself never loads the driver (it is the root of the checkpointed process
// tree, and a CUDA process there without an endpoint would refuse the checkpoint): native
// checkpoint calls and cuMemGetInfo go through a bare job_worker ("controller").
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "scratch_dir.h"

namespace jobtest {

/// Bound on every wait for a child (a reply line, an exit, a `cusnap` command), ms. Generous:
/// the suite runs under ASan on a loaded 2-core machine.
inline constexpr int kWaitMs = 90'000;

/// Exit statuses of `cusnap` (src/cli/exit_codes.h).
inline constexpr int kExitRefused = 3;
inline constexpr int kExitFailedAfterChange = 4;
inline constexpr int kExitRestoreRefused = 5;

/// CUprocessState values (cuda.h) as `state <pid>` prints them.
inline constexpr int kStateRunning = 0;
inline constexpr int kStateLocked = 1;
inline constexpr int kStateCheckpointed = 2;

/// A finished `cusnap` command.
struct Ran {
  int status = -1;  ///< exit status; -1 when killed or timed out
  std::string out, err;
};

/// One job_worker process.
struct Worker {
  std::string name;     ///< the test's name for it, in failure messages
  pid_t pid = -1;       ///< -1 once reaped
  int in = -1;          ///< its stdin
  int out = -1;         ///< its stdout
  int channel = -1;     ///< our end of its descriptor channel (its descriptor 3)
  std::string pending;  ///< bytes read past the last line
  bool shim = true;     ///< carries the shim (a participant with an endpoint)
  bool cuda = true;     ///< a job_worker that uses CUDA and answers commands (not a launcher)
  bool child = true;    ///< our child (reaped here), not a launcher's
  /// The simulated physical GPU behind each of its ordinals now (its CUDA_VISIBLE_DEVICES
  /// at start, moved by each Resume's device map); empty: not tracked (ordinal N is GPU N).
  std::vector<int> physical{};
};

/// A view (mapping) the test made: which worker, which allocation, where in it.
struct ViewRecord {
  Worker* worker;
  std::string view, allocation;
  size_t offset_mib = 0, mib = 0;
};

/// What the driver and the application see at one view ("info" and "retain" replies).
struct ViewFacts {
  uint64_t va = 0, size = 0, offset = 0, allocation_id = 0;
  int location_type = -1, location_id = -1;
  int access[2] = {0, 0};
  std::string retained;  ///< the handle cuMemRetainAllocationHandle returns there
};

using Snapshot = std::vector<ViewFacts>;  ///< one per views_ entry, same order

/// Makes a socket file at `path` that nothing listens on (bound, then closed): what a shim
/// leaves when it ends without removing its endpoint, or a socket without a listener.
void BindDeadSocket(const std::string& path);

/// A job of job_worker processes on a machine of its own (scratch directory dir_, with its
/// control directory and simulated machine).
class JobTest : public cusnap::testing::ScratchDirTest {
 protected:
  JobTest() : ScratchDirTest("job-test") {}
  void SetUp() override;
  void TearDown() override;

  /// Starts `job_worker <device>`, through `cusnap run` unless `bare`, and waits for "ready".
  /// `visible`: its CUDA_VISIBLE_DEVICES (unset when empty), `physical` the GPU behind each
  /// of the ordinals that gives it (Worker::physical).
  Worker& Start(const std::string& name, int device, bool bare = false,
                const std::string& visible = "", const std::vector<int>& physical = {});
  /// Starts `args` (a full command line; prefix `cusnap run --` to carry the shim) with its
  /// stdin/stdout on pipes and descriptor 3 on a descriptor channel, like a job_worker, but
  /// reads nothing: the caller reads its first line with Ask(w, "").
  Worker& StartProgram(const std::string& name, const std::vector<std::string>& args);
  /// Starts `cusnap run -- job_worker launch <devices...>`: a launcher carrying the shim that
  /// never uses CUDA and forks one worker per device. Returns the launcher then its workers
  /// (named name0, name1, ...; their pids asked with "pid").
  std::vector<Worker*> StartLaunched(const std::string& name, const std::vector<int>& devices);
  /// Sends one command and returns the reply line ("<eof>" / "<timeout>" when none came
  /// within `wait_ms`; a timeout fails the test).
  std::string Ask(Worker& w, const std::string& command, int wait_ms = kWaitMs);
  /// Says "exit" and reaps the worker (SIGKILL after kWaitMs); returns its wait status.
  int Stop(Worker& w);
  /// SIGKILL and reap.
  void Kill(Worker& w);

  // The job's topology. Each asserts the worker answered "ok" and records what later checks
  // need. Allocation names are global: an importer uses the creator's name.
  void Create(Worker& w, const std::string& allocation, size_t mib, const char* where, int id,
              bool exportable = true);
  /// `from` exports `allocation`, the descriptor is relayed, `to` imports it.
  void Share(Worker& from, const std::string& allocation, Worker& to);
  void Map(Worker& w, const std::string& view, const std::string& allocation, size_t offset_mib,
           size_t mib, const std::string& devices);
  /// Create, then Map all `mib` of it at `view` (access for `devices`), then Fill.
  void CreateFilled(Worker& w, const std::string& allocation, size_t mib, const char* where,
                    int id, const std::string& view, const std::string& devices);
  /// Share, then `to` Maps all `mib` of it at `view` (access for `devices`).
  void ShareMapped(Worker& from, const std::string& allocation, Worker& to,
                   const std::string& view, size_t mib, const std::string& devices);
  /// Memory shared both ways: `creator` (on device 0) creates A (2 MiB, filled, its view "a"),
  /// which `importer` maps at "ai"; `importer` (on device 1) creates B ("b"), which `creator`
  /// maps at "bi".
  void ShareBothWays(Worker& creator, Worker& importer);
  /// A multicast team `mc` of 2 MiB for 2 devices: `creator` creates it and shares it with
  /// `member`; `creator` adds device 0 and binds its `creator_memory`, `member` adds device 1
  /// and binds its `member_memory` (both 2 MiB, at offset 0).
  void MulticastTeam(Worker& creator, Worker& member, const std::string& mc,
                     const std::string& creator_memory, const std::string& member_memory);
  /// Writes the allocation's pattern through `view`.
  void Fill(Worker& w, const std::string& view);
  /// Unmaps `view` (and forgets it).
  void Unmap(Worker& w, const std::string& view);
  /// Releases the worker's handle of `allocation`; `freed`: no process holds it any more, so
  /// it no longer counts as device memory in use.
  void Release(Worker& w, const std::string& allocation, bool freed);

  /// Every byte of every recorded view holds its allocation's pattern.
  void CheckEveryByte();
  /// The driver's facts at every recorded view.
  Snapshot Snap();
  /// After a restore: same VAs, sizes, offsets, application handles, locations and access
  /// (ordinals survive a restore onto other GPUs, DRIVER-FACTS F7); views that shared an
  /// allocation still share one and views that did not still do not; every allocation is a
  /// fresh one.
  void ExpectSameLayout(const Snapshot& before, const Snapshot& after);
  /// A word written through `a`'s view is read through `b`'s, and the other way round (the
  /// word is then put back, so the pattern holds again). Both views map `allocation`.
  void CrossWrite(Worker& a, const std::string& view_a, Worker& b, const std::string& view_b);

  /// Runs the real `cusnap` with `args` (bounded); stdout and stderr captured.
  Ran Cusnap(const std::vector<std::string>& args);
  /// The same, and once stdout has a whole line starting with `after` (a phase's line: that
  /// phase has finished, the next one runs), waits `settle_ms` (the next phase has begun)
  /// and sends `signo` to it, `times` times, `settle_ms` apart. Fails the test when no such
  /// line came.
  Ran CusnapSignalled(const std::vector<std::string>& args, const std::string& after, int signo,
                      int settle_ms = 0, int times = 1);
  /// The same, calling `watch(pid, so_far)` after each read of its output (it may signal
  /// or stop the process: the fault matrix's pauses, tests/faults/).
  Ran CusnapWatched(const std::vector<std::string>& args,
                    const std::function<void(pid_t, const Ran&)>& watch);
  /// The UUID of each simulated GPU, in physical (PCI) order, asked of a bare controller.
  std::vector<std::string> MachineUuids();
  /// `cusnap checkpoint <target_> --state-dir <state>`.
  Ran Checkpoint(const std::string& state);
  /// `cusnap restore <target_> --state-dir <state>` plus `extra`.
  Ran Restore(const std::string& state, const std::vector<std::string>& extra = {});
  /// Device memory in use (cuMemGetInfo total - free) per device, across every process of
  /// this test's simulated machine, asked of a short-lived bare controller.
  std::vector<uint64_t> UsedBytes();
  /// Bytes of the live device allocations, per device where they are now (what UsedBytes
  /// shows while the job runs).
  std::vector<uint64_t> CreatedDeviceBytes() const;
  /// One full cusnap cycle with every check: Suspend, then Resume.
  void Cycle(const std::string& state, const std::vector<std::string>& restore_extra = {},
             const std::map<int, int>& device_map = {});
  /// Checkpoint (exit 0), then ExpectSuspended. Returns the layout before the checkpoint.
  Snapshot Suspend(const std::string& state);
  /// GPU memory released on the machine, every worker holding nothing in the driver
  /// (introspection, which the native lock does not block), every participant's shim
  /// RELEASED and its process CHECKPOINTED.
  void ExpectSuspended();
  /// Restore (exit 0, `restore_extra` added), then every byte, the layout against `before`
  /// (ordinals unchanged), the memory in use per physical GPU (`device_map`: old physical GPU
  /// -> new, what the --device-map in `restore_extra` says), and writes crossing between every
  /// pair of processes whose views share bytes.
  void Resume(const std::string& state, const Snapshot& before,
              const std::vector<std::string>& restore_extra = {},
              const std::map<int, int>& device_map = {});
  /// Resume's checks after a command that resumed the job (restore, recover) exited 0:
  /// every byte, layout, memory per physical GPU moved by `device_map`, crossing writes.
  void ExpectResumed(const Snapshot& before, const std::map<int, int>& device_map = {});
  /// Every participant's phase as `cusnap status --all --json` reports it.
  std::vector<std::string> Phases();
  /// What the native checkpoint API says about `pid` (CUprocessState), through a controller.
  int NativeState(pid_t pid);

  std::string PidArg() const;
  /// The workers still running (a snapshot: starting a controller adds to workers_).
  std::vector<Worker*> Live();
  /// How many running workers carry the shim (what `status --all` lists).
  size_t LiveParticipants();
  /// Which processes `checkpoint` and `restore` act on: "--pid <this process>" by default.
  std::vector<std::string> target_;
  /// Environment entries ("NAME=value") every `cusnap` command runs with, on top of ours.
  std::vector<std::string> cusnap_env_;

  std::deque<Worker> workers_;  // deque: references stay valid as workers are added
  std::map<std::string, uint32_t> seeds_;
  /// Live device allocations: name -> (MiB, device now). Resume moves them by the device map.
  std::map<std::string, std::pair<size_t, int>> device_allocations_;
  std::vector<ViewRecord> views_;
  /// Simulated devices of this test's machine (SIMCUDA_DEVICE_COUNT; the driver's default 2):
  /// how many entries UsedBytes has.
  size_t device_count_ = 2;
};

/// The text after "ok " in a reply, or "" when the reply is not "ok ...".
std::string OkValue(const std::string& reply);

/// `prefix`, then `n`, then `suffix` ("A3", "R2_0", " 1234"). Built with append: GCC 12 at
/// -O3 takes `"A" + std::to_string(n)` for an overlapping copy, a -Werror=restrict false
/// positive that broke the release preset.
inline std::string Numbered(const char* prefix, long long n, const char* suffix = "") {
  return std::string(prefix).append(std::to_string(n)).append(suffix);
}

}  // namespace jobtest
