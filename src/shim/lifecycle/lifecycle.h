// The shim's lifecycle: the states a process goes through while a checkpoint takes its
// sharing apart and a restore puts it back (DESIGN.md, "Lifecycle"), and the rules for
// moving between them. Requests come from the coordinator, one at a time, on the
// endpoint's control thread (protocol.h ops kQuiesce .. kActivate).
//
//   ACTIVE -> QUIESCED -> MULTICAST_DETACHED -> SAVED -> RELEASED
//     -> (native checkpoint, native restore: the coordinator)
//     -> REALLOCATED -> IMPORTED -> MULTICAST_CREATED -> MULTICAST_IMPORTED
//     -> MULTICAST_JOINED -> RESTORED (kMulticastBind; application calls still wait)
//     -> ACTIVE (kActivate: application calls proceed).
//   kResume: QUIESCED, MULTICAST_DETACHED or SAVED -> ACTIVE (a refused checkpoint: no
//   unicast memory was touched yet), unless DETACH_MULTICAST took a multicast team apart
//   (LifecycleSteps::MulticastDestroyed).
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
#include "common/protocol.h"
#include "shim/lifecycle/quiesce.h"

namespace cusnap::shim {

/// What one step moved (carrier steps) or did; reply args of the request.
struct StepResult {
  uint64_t bytes = 0;         ///< bytes copied through the host carrier
  uint64_t copy_ns = 0;       ///< copies enqueued and synchronized
  uint64_t register_ns = 0;   ///< host registration and unregistration of the arena
  uint64_t provision_ns = 0;  ///< growing the arena
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
};

/// The state machine of one process. Thread-safe: Handle() runs on the control thread;
/// phase() and failure() may be read from any thread (kIdentify).
class Lifecycle {
 public:
  /// How long kQuiesce waits for tracked calls in flight when the request gives no bound.
  static constexpr int64_t kDefaultDrainMs = 10'000;

  Lifecycle(LifecycleSteps& steps, QuiesceGate& gate);

  /// Runs one lifecycle request and returns the reply header: op echoed, status 0 or the
  /// error's code (a CUresult, or -1 for a refusal out of order), phase after the request,
  /// text naming the process and the resource on failure. Request args: kQuiesce arg[0] =
  /// drain bound in ms (0: kDefaultDrainMs). Reply args of kSave and kReallocate: {bytes,
  /// ns (whole step), copy ns, register ns, provision ns}; other steps: {0, ns}.
  /// Ops that are not lifecycle steps are refused (status -1).
  proto::Header Handle(const proto::Header& request);

  /// The state now (RESTORED: restored, application calls wait for kActivate).
  proto::Phase phase() const { return phase_.load(std::memory_order_acquire); }
  /// Why the shim is FAILED ("" otherwise).
  std::string failure() const;

 private:
  struct Transition;
  /// The rows of the state machine (lifecycle.cc), each with the step it runs.
  static const Transition kTransitions[];

  Result<StepResult> Run(proto::Op op, const proto::Header& request);
  void SetFailed(const std::string& message);

  // The steps the rows run; each returns the step's error, or what it moved.
  Result<StepResult> Quiesce(const proto::Header& request);
  Result<StepResult> DetachMulticast(const proto::Header& request);
  Result<StepResult> Save(const proto::Header& request);
  Result<StepResult> Release(const proto::Header& request);
  Result<StepResult> Reallocate(const proto::Header& request);
  Result<StepResult> Import(const proto::Header& request);
  Result<StepResult> MulticastCreate(const proto::Header& request);
  Result<StepResult> MulticastImport(const proto::Header& request);
  Result<StepResult> MulticastJoin(const proto::Header& request);
  Result<StepResult> MulticastBind(const proto::Header& request);
  Result<StepResult> Resume(const proto::Header& request);
  Result<StepResult> Activate(const proto::Header& request);

  LifecycleSteps& steps_;
  QuiesceGate& gate_;
  std::atomic<proto::Phase> phase_{proto::Phase::kActive};
  mutable std::mutex mutex_;  // failure_
  std::string failure_;
};

/// Name of a phase as DESIGN.md writes it ("ACTIVE", "QUIESCED", ...).
const char* PhaseName(proto::Phase phase);
/// Name of an op ("QUIESCE", "SAVE", ...), for messages.
const char* OpName(proto::Op op);

}  // namespace cusnap::shim
