// The lifecycle's state machine (lifecycle.h): one table, a row per transition, each with
// the step it runs. The work of each step lives in LifecycleSteps; this file only decides
// whether a request may run now, runs it, and moves the state.
#include "shim/lifecycle/lifecycle.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "shim/hold/hold_guard.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

using proto::Op;
using Phase = proto::ShimState;

// What a failed step leaves behind. Either way the state stays where it was (the step undid
// its partial work or can be run again: a sticky FAILED state would strand the job) and the
// failure is kept for `status`.
enum class OnFailure {
  kStateKept,    // nothing changed in the application's memory
  kDestructive,  // memory may have been changed: kResume is refused from now on
  kDestructiveIfDestroyed,  // destructive only when the step took a multicast team apart
};

constexpr const char* kResumeRefusal =
    "only a checkpoint that released nothing (no unicast memory, no multicast team) can "
    "resume; run 'cusnap recover' to finish it";

Error Refused(Op op, Phase now, const std::string& why) {
  return Error{-1, ThisProcess() + ": " + OpName(op) + " refused in phase " +
                       ShimStateName(now) + ": " + why};
}

}  // namespace

// One row per transition: the request, the state it must find and the one it leaves, what
// a failure leaves, the step, whether the gate opens once the state moved, and why the
// request is refused in any other state (null: "it needs phase <from>"). An op may have
// several rows (kResume: one per state it undoes).
struct Lifecycle::Transition {
  Op op;
  Phase from;
  Phase to;
  OnFailure on_failure;
  Result<StepResult> (Lifecycle::*step)(const proto::StepRequest& request);
  bool opens_gate;
  const char* out_of_order;
};

constexpr Lifecycle::Transition Lifecycle::kTransitions[] = {
    // checkpoint
    {Op::kQuiesce, Phase::kActive, Phase::kQuiesced, OnFailure::kStateKept,
     &Lifecycle::Quiesce, false, nullptr},
    // Save before anything is taken apart: the carrier reads each member allocation through
    // its own staging mapping, which a multicast binding does not prevent, so every byte is
    // in host memory (and the coordinator's state file on disk) before the first destructive
    // step.
    {Op::kSave, Phase::kQuiesced, Phase::kSaved, OnFailure::kStateKept, &Lifecycle::Save,
     false, nullptr},
    // The command passed its point of no return: the lease no longer rolls back.
    {Op::kCommit, Phase::kSaved, Phase::kSaved, OnFailure::kStateKept, &Lifecycle::Commit, false,
     nullptr},
    {Op::kDetachMulticast, Phase::kSaved, Phase::kMulticastDetached,
     OnFailure::kDestructiveIfDestroyed, &Lifecycle::DetachMulticast, false, nullptr},
    {Op::kRelease, Phase::kMulticastDetached, Phase::kReleased, OnFailure::kDestructive,
     &Lifecycle::Release, false, nullptr},
    // `cusnap dump`: the carrier beside CRIU's images and back (a failure changes nothing:
    // the bytes stay where they were)
    {Op::kWriteCarrier, Phase::kReleased, Phase::kReleased, OnFailure::kStateKept,
     &Lifecycle::WriteCarrier, false, nullptr},
    {Op::kReadCarrier, Phase::kReleased, Phase::kReleased, OnFailure::kStateKept,
     &Lifecycle::ReadCarrier, false, nullptr},
    // restore
    {Op::kReallocate, Phase::kReleased, Phase::kReallocated, OnFailure::kDestructive,
     &Lifecycle::Reallocate, false, nullptr},
    {Op::kImport, Phase::kReallocated, Phase::kImported, OnFailure::kDestructive, &Lifecycle::Import,
     false, nullptr},
    {Op::kMulticastCreate, Phase::kImported, Phase::kMulticastCreated, OnFailure::kDestructive,
     &Lifecycle::MulticastCreate, false, nullptr},
    {Op::kMulticastImport, Phase::kMulticastCreated, Phase::kMulticastImported,
     OnFailure::kDestructive, &Lifecycle::MulticastImport, false, nullptr},
    {Op::kMulticastJoin, Phase::kMulticastImported, Phase::kMulticastJoined, OnFailure::kDestructive,
     &Lifecycle::MulticastJoin, false, nullptr},
    // Restored, but the coordinator still compares INSPECT with the state file: the
    // application waits until kActivate.
    {Op::kMulticastBind, Phase::kMulticastJoined, Phase::kRestored, OnFailure::kDestructive,
     &Lifecycle::MulticastBind, false, nullptr},
    {Op::kActivate, Phase::kRestored, Phase::kActive, OnFailure::kStateKept,
     &Lifecycle::Activate, true, "the restore has not finished"},
    // a refused checkpoint, undone before anything was released
    {Op::kResume, Phase::kQuiesced, Phase::kActive, OnFailure::kStateKept, &Lifecycle::Resume,
     true, kResumeRefusal},
    {Op::kResume, Phase::kSaved, Phase::kActive, OnFailure::kStateKept, &Lifecycle::Resume, true,
     kResumeRefusal},
    {Op::kResume, Phase::kMulticastDetached, Phase::kActive, OnFailure::kStateKept,
     &Lifecycle::Resume, true, kResumeRefusal},
};

Lifecycle::Lifecycle(std::vector<LifecycleSteps*> step_sets, QuiesceGate& gate,
                     std::string held_marker)
    : sets_(std::move(step_sets)), gate_(gate), held_marker_(std::move(held_marker)) {}

std::string Lifecycle::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

std::string Lifecycle::checkpoint_id() const {
  std::lock_guard lock(mutex_);
  return checkpoint_id_;
}

void Lifecycle::SetCheckpointId(const std::string& id) {
  std::lock_guard lock(mutex_);
  checkpoint_id_ = id;
}

void Lifecycle::SetFailure(const std::string& message) {
  std::lock_guard lock(mutex_);
  failure_ = message;
}

Result<proto::StepReply> Lifecycle::Handle(const proto::StepRequest& request) {
  std::lock_guard run(run_mutex_);
  watch_.RequestStarted();
  const uint64_t start = MonotonicNs();
  Result<StepResult> result = request.op == Op::kRenew ? Result<StepResult>(StepResult{})
                                                       : Run(request);
  watch_.RequestEnded(request.lease_ms);
  if (!result) return result.error();
  const proto::StepReply reply{phase(), result->bytes, result->copy_ns, result->zero_bytes,
                               std::move(result->files)};
  CUSNAP_LOG_INFO("%s done: phase %s, %llu bytes in %llu ns", OpName(request.op),
                  ShimStateName(reply.state), static_cast<unsigned long long>(reply.bytes),
                  static_cast<unsigned long long>(MonotonicNs() - start));
  return reply;
}

Result<StepResult> Lifecycle::Run(const proto::StepRequest& request) {
  const Op op = request.op;
  const Phase now = phase();

  const Transition* row = nullptr;
  const Transition* any = nullptr;  // a row of this op, for the refusal's text
  for (const Transition& t : kTransitions) {
    if (t.op != op) continue;
    if (any == nullptr) any = &t;
    if (t.from == now) {
      row = &t;
      break;
    }
  }
  if (any == nullptr) return Refused(op, now, "not a lifecycle step");
  if (row == nullptr) {
    return Refused(op, now, any->out_of_order != nullptr
                                ? any->out_of_order
                                : std::string("it needs phase ") + ShimStateName(any->from));
  }

  if (row->on_failure == OnFailure::kDestructive) destroyed_ = true;
  Result<StepResult> result = (this->*row->step)(request);
  if (row->on_failure == OnFailure::kDestructiveIfDestroyed &&
      std::any_of(sets_.begin(), sets_.end(),
                  [](const LifecycleSteps* set) { return set->MulticastDestroyed(); })) {
    destroyed_ = true;
  }
  if (!result) {
    // The state stays: the step can be run again (recover, restore), or undone by kResume
    // while nothing was destroyed. The gate stays closed: application calls wait.
    // A refusal (kResume after something was destroyed) is said as it is.
    const bool again = destroyed_ && row->on_failure != OnFailure::kStateKept;
    const Error kept = again
        ? InContext(ThisProcess(),
                    std::string(OpName(op)) + " failed; the shim stays " + ShimStateName(now) +
                        " and the step can be run again ('cusnap recover')",
                    result.error())
        : result.error();
    if (again) {  // a failure the coordinator rolls back needs no record
      // Kept for `cusnap status`, and answered to the command that asked, which says it; on
      // the job's stderr only at CUSNAP_LOG=debug: a line there during a restore from images
      // grows a file CRIU restores as dumped, and the images, once mended, would no longer
      // restore.
      SetFailure(kept.message);
      CUSNAP_LOG_DEBUG("%s", kept.message.c_str());
    }
    return kept;
  }
  SetFailure("");
  phase_.store(row->to, std::memory_order_release);
  if (row->opens_gate) {
    destroyed_ = false;
    committed_ = false;
    gate_.Open();
  }
  return result;
}

void Lifecycle::HoldDue() {
  std::lock_guard run(run_mutex_);  // never in the middle of a request
  // A request that came while this waited for run_mutex_ is activity.
  const std::optional<uint64_t> quiet_ms = watch_.TakeHold();
  if (!quiet_ms) return;
  const Phase now = phase();
  if (now == Phase::kActive) return;
  CUSNAP_LOG_WARN("%s is checkpointed (phase %s) and ran %llu ms with no cusnap command at work "
                  "(the command at work on it ended before activate): stopped "
                  "again to hold the job; 'cusnap restore' continues it and goes on",
                  ThisProcess().c_str(), ShimStateName(now),
                  static_cast<unsigned long long>(*quiet_ms));
  if (Status held = HoldThisProcess(held_marker_, ShimStateName(now)); !held) {
    CUSNAP_LOG_ERROR("%s: cannot hold it again: %s", ThisProcess().c_str(),
                     held.error().message.c_str());
  }
}

void Lifecycle::LeaseRanOut(uint64_t generation) {
  std::lock_guard run(run_mutex_);
  if (!watch_.StillRanOut(generation)) return;  // a request came meanwhile
  const Phase now = phase();
  if (now != Phase::kQuiesced && now != Phase::kSaved) return;
  if (committed_ || destroyed_) {
    CUSNAP_LOG_WARN("the command's lease expired in phase %s after its point of no return: "
                    "application calls wait until 'cusnap recover' or 'cusnap restore'",
                    ShimStateName(now));
    return;
  }
  GateBypass bypass;  // Discard may pass through the shim's own hooks
  DiscardAll();
  SetCheckpointId("");
  const std::string why = ThisProcess() + ": the command holding this process sent nothing for " +
                          std::to_string(watch_.lease_ms()) + " ms (its lease expired) in phase " +
                          ShimStateName(now) + ", before anything was changed: rolled back "
                          "by itself to ACTIVE, the application goes on";
  SetFailure(why);
  phase_.store(Phase::kActive, std::memory_order_release);
  gate_.Open();
  CUSNAP_LOG_WARN("%s", why.c_str());
}

namespace {

// A step that only succeeds or fails, as a step that moved nothing.
Result<StepResult> Moved(Status status) {
  if (!status) return status.error();
  return StepResult{};
}
Result<StepResult> Moved(Result<StepResult> result) { return result; }

}  // namespace

template <typename Step>
Result<StepResult> Lifecycle::OnEachSet(Step step) {
  StepResult total;
  for (LifecycleSteps* set : sets_) {
    Result<StepResult> one = Moved(step(*set));
    if (!one) return one;
    total.bytes += one->bytes;
    total.copy_ns += one->copy_ns;
    total.zero_bytes += one->zero_bytes;
    for (auto& f : one->files) total.files.push_back(std::move(f));
  }
  return total;
}

void Lifecycle::DiscardAll() {
  for (LifecycleSteps* set : sets_) set->Discard();
}

Result<StepResult> Lifecycle::Quiesce(const proto::StepRequest& request) {
  const int64_t drain_ms =
      request.drain_ms != 0 ? static_cast<int64_t>(request.drain_ms) : kDefaultDrainMs;
  if (Status closed = gate_.Close(drain_ms); !closed) return closed.error();
  // No new call passes now; the work already queued on the devices must finish before SAVE
  // reads memory. When it does not, nothing was changed: the gate reopens.
  if (Result<StepResult> drained =
          OnEachSet([&](LifecycleSteps& set) { return set.DrainDeviceWork(drain_ms); });
      !drained) {
    gate_.Open();
    return drained.error();
  }
  return StepResult{};
}

Result<StepResult> Lifecycle::DetachMulticast(const proto::StepRequest&) {
  return OnEachSet([](LifecycleSteps& set) { return set.DetachMulticast(); });
}

Result<StepResult> Lifecycle::Save(const proto::StepRequest& request) {
  // A dump's save names the carrier's files (their folder came as a descriptor, control.cc).
  Result<StepResult> result =
      OnEachSet([&](LifecycleSteps& set) { return set.Save(request.carrier_path); });
  if (!result) {
    DiscardAll();
    return result;
  }
  SetCheckpointId(request.checkpoint_id);
  return result;
}

Result<StepResult> Lifecycle::Release(const proto::StepRequest& request) {
  // From here until activate the process is checkpointed and may be held stopped: a
  // hangup or a stray SIGCONT must not end or continue it (hold_guard.h).
  if (!held_marker_.empty()) ArmHoldGuard(held_marker_);
  watch_.ArmHold(request.held && !held_marker_.empty());
  return OnEachSet([](LifecycleSteps& set) { return set.Release(); });
}

Result<StepResult> Lifecycle::Reallocate(const proto::StepRequest& request) {
  // Onto other GPUs: the steps rebuild on the recorded ordinals, so each must name the GPU
  // the map moved its old GPU to (the driver keeps ordinals, DRIVER-FACTS F7b).
  if (!request.device_map.empty()) {
    if (Result<StepResult> moved = OnEachSet([&](LifecycleSteps& set) {
          return set.CheckDevicesAfterMove(request.device_map);
        });
        !moved) {
      return moved.error();
    }
  }
  return OnEachSet([](LifecycleSteps& set) { return set.Reallocate(); });
}

Result<StepResult> Lifecycle::WriteCarrier(const proto::StepRequest& request) {
  if (request.carrier_path.empty()) return Error{EINVAL, ThisProcess() + ": WRITE_CARRIER names no file"};
  return OnEachSet([&](LifecycleSteps& set) { return set.WriteCarrier(request.carrier_path); });
}

Result<StepResult> Lifecycle::ReadCarrier(const proto::StepRequest& request) {
  // "": from where the files were written.
  return OnEachSet([&](LifecycleSteps& set) { return set.ReadCarrier(request.carrier_path); });
}

Result<StepResult> Lifecycle::Import(const proto::StepRequest&) {
  return OnEachSet([](LifecycleSteps& set) { return set.Import(); });
}

Result<StepResult> Lifecycle::MulticastCreate(const proto::StepRequest& request) {
  return OnEachSet([&](LifecycleSteps& set) {
    set.DropMulticast(request.dropped_multicast);
    return set.MulticastCreate();
  });
}

Result<StepResult> Lifecycle::MulticastImport(const proto::StepRequest& request) {
  return OnEachSet([&](LifecycleSteps& set) {
    set.DropMulticast(request.dropped_multicast);
    return set.MulticastImport();
  });
}

Result<StepResult> Lifecycle::MulticastJoin(const proto::StepRequest& request) {
  return OnEachSet([&](LifecycleSteps& set) {
    set.DropMulticast(request.dropped_multicast);
    return set.MulticastJoin();
  });
}

Result<StepResult> Lifecycle::MulticastBind(const proto::StepRequest& request) {
  return OnEachSet([&](LifecycleSteps& set) {
    set.DropMulticast(request.dropped_multicast);
    return set.MulticastBind();
  });
}

Result<StepResult> Lifecycle::Commit(const proto::StepRequest&) {
  committed_ = true;
  return StepResult{};
}

Result<StepResult> Lifecycle::Resume(const proto::StepRequest&) {
  // Detach took a multicast team apart, or a release began: only a roll forward can put
  // them back (destroyed_ covers this cycle only).
  if (destroyed_) return Refused(Op::kResume, phase(), kResumeRefusal);
  DiscardAll();
  SetCheckpointId("");
  return StepResult{};
}

Result<StepResult> Lifecycle::Activate(const proto::StepRequest&) {
  DisarmHoldGuard();
  watch_.ArmHold(false);
  DiscardAll();
  SetCheckpointId("");
  return StepResult{};
}

}  // namespace cusnap::shim
