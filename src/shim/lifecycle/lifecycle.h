// The shim's lifecycle: the states a process goes through while a checkpoint takes its
// sharing apart and a restore puts it back (DESIGN.md, "Lifecycle"), and the rules for
// moving between them. Requests come from the coordinator, one at a time, on the
// endpoint's control thread (protocol.h ops kQuiesce .. kActivate).
//
//   ACTIVE -> QUIESCED -> SAVED -> MULTICAST_DETACHED -> RELEASED
//     -> (native checkpoint, native restore: the coordinator)
//     -> REALLOCATED -> IMPORTED -> MULTICAST_CREATED -> MULTICAST_IMPORTED
//     -> MULTICAST_JOINED -> RESTORED (kMulticastBind; application calls still wait)
//     -> ACTIVE (kActivate: application calls proceed).
//   kResume: QUIESCED, SAVED or MULTICAST_DETACHED -> ACTIVE (a refused checkpoint: no
//   unicast memory was touched yet), unless DETACH_MULTICAST took a multicast team apart
//   (LifecycleSteps::MulticastDestroyed). SAVE runs before DETACH_MULTICAST so that the
//   coordinator can write the state file before anything is destroyed.
//
// kRenew (any state) renews the command's lease; kCommit (SAVED) marks its point of no
// return.
//
// lifecycle.cc holds these rules as one table, a row per transition with the step it runs.
// A request out of order is refused and changes nothing. A failed step leaves the state as
// it was, with its message (failure(), reported by status): each step undoes its partial
// work or skips what is already done, so it can be run again (`cusnap recover`), and the
// gate stays closed meanwhile. Once a destructive step (release; detach once it destroyed
// a multicast team) was attempted, kResume is refused: only rolling forward finishes.
//
// The lease: every request may carry one (StepRequest::lease_ms). While the shim
// is QUIESCED or SAVED, before kCommit and before anything destructive, a lease that runs
// out (no request for lease_ms after the last one ended: a command killed with SIGKILL)
// rolls the shim back by itself: saved bytes discarded, gate open, ACTIVE, and failure()
// says why. After the point of no return application calls wait for as long as it takes.
//
// The hold after a command (CUSNAP_HOLD=stop, coordinator/participants/hold.h): a checkpoint whose
// release request says `held` stops the process after its native checkpoint, and a restore
// continues it first. A restore killed after that continue (before it changed anything, or
// half way) would leave the job running with its memory gone until the next restore: the
// threads that never call CUDA run on, and PyTorch's heartbeat monitor aborts the process
// once its watchdog has waited long enough (docs/LONG-SUSPEND.md). So from release to
// activate the lease watch holds the process again once no request came for a lease since
// its last activity (hold/hold_again.h has the timing): the shim writes its hold marker,
// with its phase, and stops itself (HoldThisProcess, hold/hold_guard.h): held again, as the
// checkpoint left it, and `cusnap restore` continues it and goes on. A process whose command
// died is thus held again one lease after the command's last request.
//
// The lease's thread and timing are the lease watch's (lease_watch.h); it calls back here to
// roll back or hold.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/messages.h"
#include "shim/lifecycle/lease_watch.h"
#include "shim/lifecycle/quiesce.h"

namespace cusnap::shim {

/// What one step moved (carrier steps); the reply's bytes and copy_ns (messages.h).
struct StepResult {
  uint64_t bytes = 0;    ///< bytes copied through the host carrier
  uint64_t copy_ns = 0;  ///< copies enqueued and synchronized
  uint64_t zero_bytes = 0;  ///< of `bytes`, all-zero chunks: not copied (memset at restore)
  std::vector<proto::CarrierFile> files{};  ///< kWriteCarrier: the part files and digests
};

/// The work behind each step, on this process's tracked allocations: one set of steps per
/// kind of memory, each doing nothing where its memory has no part (the default of every
/// step). A process's lifecycle drives three: the drain (drain.h), the unicast steps
/// (unicast_steps.h) and the multicast steps (multicast_steps.h); tests substitute their own.
/// Called on the control thread only, one at a time, with the quiesce gate closed.
class LifecycleSteps {
 public:
  virtual ~LifecycleSteps() = default;
  /// Takes multicast objects apart (multicast_steps.h; nothing for unicast memory).
  virtual Status DetachMulticast() { return Ok{}; }
  /// True once DetachMulticast released a multicast object in this cycle: the team cannot
  /// be put back without a restore, so kResume is refused and a detach failure is final.
  virtual bool MulticastDestroyed() const { return false; }
  /// Carrier D2H of every tracked allocation this process created that still has a handle
  /// or a mapping: into host memory, or (a dump: `carrier_path` "<dir>/<stem>") streamed
  /// into the carrier's part files there.
  virtual Result<StepResult> Save(const std::string& carrier_path) {
    (void)carrier_path;
    return StepResult{};
  }
  /// Unmaps every tracked mapping (keeping the VA reservation) and releases every real
  /// handle; drops export cache entries.
  virtual Status Release() { return Ok{}; }
  /// Creators: fresh allocations at the same VAs, carrier H2D, access re-applied, logical
  /// handles repointed, export cache refilled. The recorded ordinals are used as they are:
  /// a restore onto other GPUs keeps the process's ordinals and changes the physical GPU
  /// behind them (DRIVER-FACTS F7).
  virtual Result<StepResult> Reallocate() { return StepResult{}; }
  /// kWriteCarrier (a dump, RELEASED): the carrier's saved bytes to the file `path`, the
  /// arena given back. Nothing without a carrier.
  virtual Result<StepResult> WriteCarrier(const std::string& path) {
    (void)path;
    return StepResult{};
  }
  /// kReadCarrier (RELEASED): what WriteCarrier wrote, from the directory `dir`, back into
  /// the carrier (nothing when it is in memory). Reallocate refuses until then.
  virtual Result<StepResult> ReadCarrier(const std::string& dir) {
    (void)dir;
    return StepResult{};
  }
  /// Before Reallocate of a restore onto other GPUs (StepRequest::device_map): an error when
  /// an ordinal of this process does not name the GPU the map moved its old GPU to (nothing
  /// may be rebuilt on the recorded ordinals then). Nothing to check by default.
  virtual Status CheckDevicesAfterMove(const std::string& device_map) {
    (void)device_map;
    return Ok{};
  }
  /// Importers: fresh descriptors from the creators, mapped at the old VAs, access re-applied.
  virtual Status Import() { return Ok{}; }
  /// Multicast rebuild (nothing for unicast memory).
  virtual Status MulticastCreate() { return Ok{}; }
  virtual Status MulticastImport() { return Ok{}; }
  virtual Status MulticastJoin() { return Ok{}; }
  virtual Status MulticastBind() { return Ok{}; }
  /// Recover: drops this process's part of the multicast teams `teams` (a member exited)
  /// before a rebuild step; see MulticastSteps::Drop.
  virtual void DropMulticast(const std::vector<proto::ObjectId>& teams) { (void)teams; }
  /// Forgets what Save kept (the checkpoint was refused, or the cycle finished).
  virtual void Discard() {}
  /// With the gate closed: waits, at most `deadline_ms`, for the work the application queued
  /// on its devices (drain.h); an error when work is still in flight or a stream capture is
  /// open (nothing changed: the quiesce reopens the gate).
  virtual Status DrainDeviceWork(int64_t deadline_ms) {
    (void)deadline_ms;
    return Ok{};
  }
};

/// The state machine of one process. Thread-safe: Handle() runs on the control thread;
/// phase() and failure() may be read from any thread (kIdentify). The lease watch's thread
/// starts with the first request that carries a lease; the destructor stops it.
class Lifecycle final : private LeaseWatch::Owner {
 public:
  /// How long kQuiesce waits for tracked calls in flight when the request gives no bound.
  static constexpr int64_t kDefaultDrainMs = 10'000;

  /// `step_sets`: the sets each step runs on, in this order, stopping at the first that
  /// fails (what they moved adds up); each must outlive the lifecycle. `held_marker`: this
  /// process's hold marker (HeldMarkerPath); when given, the release step arms the hold
  /// guard and activate disarms it (hold/hold_guard.h). "" (tests): none.
  Lifecycle(std::vector<LifecycleSteps*> step_sets, QuiesceGate& gate,
            std::string held_marker = "");
  /// One set of steps.
  Lifecycle(LifecycleSteps& steps, QuiesceGate& gate, std::string held_marker = "")
      : Lifecycle(std::vector<LifecycleSteps*>{&steps}, gate, std::move(held_marker)) {}
  Lifecycle(const Lifecycle&) = delete;
  Lifecycle& operator=(const Lifecycle&) = delete;

  /// Runs one lifecycle request and returns its reply: the state after it, and for kSave and
  /// kReallocate the bytes and copy time; or the error, coded as a CUresult, or -1 for a
  /// refusal out of order, naming the process and the resource. Renews the lease with the
  /// request's (lease_ms 0: no lease from now on). kQuiesce waits
  /// request.drain_ms for tracked calls in flight (0: kDefaultDrainMs). Ops that are not
  /// lifecycle steps are refused (-1).
  Result<proto::StepReply> Handle(const proto::StepRequest& request);

  /// The state now (RESTORED: restored, application calls wait for kActivate).
  proto::ShimState phase() const { return phase_.load(std::memory_order_acquire); }
  /// Why the last step failed, or why the lease rolled the shim back ("" after a step that
  /// succeeded).
  std::string failure() const;
  /// The checkpoint whose bytes this process holds: the id its last successful kSave was
  /// given, until kResume or kActivate ends that checkpoint ("" when none).
  std::string checkpoint_id() const;

 private:
  struct Transition;
  /// The rows of the state machine (lifecycle.cc), each with the step it runs.
  static const Transition kTransitions[];

  Result<StepResult> Run(const proto::StepRequest& request);
  void SetFailure(const std::string& message);
  void SetCheckpointId(const std::string& id);
  // The lease watch's callbacks: roll back when the lease ran out with no request since
  // `generation` (QUIESCED or SAVED, before the commit and anything destructive); hold the
  // process again. Both wait for the request running now.
  void LeaseRanOut(uint64_t generation) override;
  void HoldDue() override;
  // Runs `step` on every step set in order (the constructor's).
  template <typename Step>
  Result<StepResult> OnEachSet(Step step);
  void DiscardAll();

  // The steps the rows run; each returns the step's error, or what it moved.
  Result<StepResult> Quiesce(const proto::StepRequest& request);
  Result<StepResult> Commit(const proto::StepRequest& request);
  Result<StepResult> DetachMulticast(const proto::StepRequest& request);
  Result<StepResult> Save(const proto::StepRequest& request);
  Result<StepResult> Release(const proto::StepRequest& request);
  Result<StepResult> Reallocate(const proto::StepRequest& request);
  Result<StepResult> WriteCarrier(const proto::StepRequest& request);
  Result<StepResult> ReadCarrier(const proto::StepRequest& request);
  Result<StepResult> Import(const proto::StepRequest& request);
  Result<StepResult> MulticastCreate(const proto::StepRequest& request);
  Result<StepResult> MulticastImport(const proto::StepRequest& request);
  Result<StepResult> MulticastJoin(const proto::StepRequest& request);
  Result<StepResult> MulticastBind(const proto::StepRequest& request);
  Result<StepResult> Resume(const proto::StepRequest& request);
  Result<StepResult> Activate(const proto::StepRequest& request);

  const std::vector<LifecycleSteps*> sets_;
  QuiesceGate& gate_;
  const std::string held_marker_;
  std::atomic<proto::ShimState> phase_{proto::ShimState::kActive};
  mutable std::mutex mutex_;  // failure_, checkpoint_id_
  std::string failure_;
  std::string checkpoint_id_;
  std::mutex run_mutex_;      // one request (or lease callback) at a time; guards the next two
  bool committed_ = false;    // kCommit came in this cycle: the lease no longer rolls back
  bool destroyed_ = false;    // a destructive step was attempted in this cycle
  LeaseWatch watch_{*this};   // last: its thread stops before anything it calls back into goes
};

}  // namespace cusnap::shim
