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
// lifecycle.cc holds these rules as one table, a row per transition with the step it runs.
// A request out of order is refused and changes nothing; a failure inside destructive work
// (release, reallocate, import, multicast rebuild; detach once it destroyed something)
// leaves the shim FAILED for good, with its message (SPEC-REFERENCE K.3 #15). A failed
// kQuiesce or kSave, or a failed kDetachMulticast that destroyed nothing (it undid its own
// work), leaves the state as it was.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/messages.h"
#include "shim/lifecycle/quiesce.h"

namespace cusnap::shim {

/// What one step moved (carrier steps); the reply's bytes and copy_ns (messages.h).
struct StepResult {
  uint64_t bytes = 0;    ///< bytes copied through the host carrier
  uint64_t copy_ns = 0;  ///< copies enqueued and synchronized
};

/// The work behind each step, on this process's tracked allocations. The real one is
/// UnicastSteps (unicast_steps.h); tests substitute their own. Called on the control
/// thread only, one at a time, with the quiesce gate closed.
class LifecycleSteps {
 public:
  virtual ~LifecycleSteps() = default;
  /// Takes multicast objects apart (multicast_steps.h; nothing for unicast memory).
  virtual Status DetachMulticast() { return Ok{}; }
  /// True once DetachMulticast released a multicast object in this cycle: the team cannot
  /// be put back without a restore, so kResume is refused and a detach failure is final.
  virtual bool MulticastDestroyed() const { return false; }
  /// Carrier D2H of every tracked allocation this process created that still has a handle
  /// or a mapping.
  virtual Result<StepResult> Save() = 0;
  /// Unmaps every tracked mapping (keeping the VA reservation) and releases every real
  /// handle; drops export cache entries.
  virtual Status Release() = 0;
  /// Creators: fresh allocations at the same VAs, carrier H2D, access re-applied, logical
  /// handles repointed, export cache refilled. The recorded ordinals are used as they are:
  /// a restore onto other GPUs keeps the process's ordinals and changes the physical GPU
  /// behind them (DRIVER-FACTS F7).
  virtual Result<StepResult> Reallocate() = 0;
  /// Importers: fresh descriptors from the creators, mapped at the old VAs, access re-applied.
  virtual Status Import() = 0;
  /// Multicast rebuild (issue 5; nothing for unicast memory).
  virtual Status MulticastCreate() { return Ok{}; }
  virtual Status MulticastImport() { return Ok{}; }
  virtual Status MulticastJoin() { return Ok{}; }
  virtual Status MulticastBind() { return Ok{}; }
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
/// phase() and failure() may be read from any thread (kIdentify).
class Lifecycle {
 public:
  /// How long kQuiesce waits for tracked calls in flight when the request gives no bound.
  static constexpr int64_t kDefaultDrainMs = 10'000;

  Lifecycle(LifecycleSteps& steps, QuiesceGate& gate);

  /// Runs one lifecycle request and returns its reply: the state after it, and for kSave and
  /// kReallocate the bytes and copy time; or the error, coded as a CUresult, or -1 for a
  /// refusal out of order, naming the process and the resource. kQuiesce waits
  /// request.drain_ms for tracked calls in flight (0: kDefaultDrainMs). Ops that are not
  /// lifecycle steps are refused (-1).
  Result<proto::StepReply> Handle(const proto::StepRequest& request);

  /// The state now (RESTORED: restored, application calls wait for kActivate).
  proto::ShimState phase() const { return phase_.load(std::memory_order_acquire); }
  /// Why the shim is FAILED ("" otherwise).
  std::string failure() const;
  /// The checkpoint whose bytes this process holds: the id its last successful kSave was
  /// given, until kResume or kActivate ends that checkpoint ("" when none).
  std::string checkpoint_id() const;

 private:
  struct Transition;
  /// The rows of the state machine (lifecycle.cc), each with the step it runs.
  static const Transition kTransitions[];

  Result<StepResult> Run(const proto::StepRequest& request);
  void SetFailed(const std::string& message);
  void SetCheckpointId(const std::string& id);

  // The steps the rows run; each returns the step's error, or what it moved.
  Result<StepResult> Quiesce(const proto::StepRequest& request);
  Result<StepResult> DetachMulticast(const proto::StepRequest& request);
  Result<StepResult> Save(const proto::StepRequest& request);
  Result<StepResult> Release(const proto::StepRequest& request);
  Result<StepResult> Reallocate(const proto::StepRequest& request);
  Result<StepResult> Import(const proto::StepRequest& request);
  Result<StepResult> MulticastCreate(const proto::StepRequest& request);
  Result<StepResult> MulticastImport(const proto::StepRequest& request);
  Result<StepResult> MulticastJoin(const proto::StepRequest& request);
  Result<StepResult> MulticastBind(const proto::StepRequest& request);
  Result<StepResult> Resume(const proto::StepRequest& request);
  Result<StepResult> Activate(const proto::StepRequest& request);

  LifecycleSteps& steps_;
  QuiesceGate& gate_;
  std::atomic<proto::ShimState> phase_{proto::ShimState::kActive};
  mutable std::mutex mutex_;  // failure_, checkpoint_id_
  std::string failure_;
  std::string checkpoint_id_;
};

}  // namespace cusnap::shim
