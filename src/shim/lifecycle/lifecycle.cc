// The lifecycle's state machine (lifecycle.h): one table, a row per transition, each with
// the step it runs. The work of each step lives in LifecycleSteps; this file only decides
// whether a request may run now, runs it, and moves the state.
#include "shim/lifecycle/lifecycle.h"

#include <unistd.h>

#include <ctime>

#include "common/log.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

using proto::Op;
using Phase = proto::ShimState;

// What a failed step leaves behind.
enum class OnFailure {
  kStateKept,          // nothing changed in the application's memory: the state stays
  kFailed,             // memory was changed: the shim is FAILED for good
  kFailedIfDestroyed,  // FAILED only when the step took a multicast team apart
};

constexpr const char* kResumeRefusal =
    "only a checkpoint that released nothing (no unicast memory, no multicast team) can resume";

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
    {Op::kDetachMulticast, Phase::kSaved, Phase::kMulticastDetached,
     OnFailure::kFailedIfDestroyed, &Lifecycle::DetachMulticast, false, nullptr},
    {Op::kRelease, Phase::kMulticastDetached, Phase::kReleased, OnFailure::kFailed,
     &Lifecycle::Release, false, nullptr},
    // restore
    {Op::kReallocate, Phase::kReleased, Phase::kReallocated, OnFailure::kFailed,
     &Lifecycle::Reallocate, false, nullptr},
    {Op::kImport, Phase::kReallocated, Phase::kImported, OnFailure::kFailed, &Lifecycle::Import,
     false, nullptr},
    {Op::kMulticastCreate, Phase::kImported, Phase::kMulticastCreated, OnFailure::kFailed,
     &Lifecycle::MulticastCreate, false, nullptr},
    {Op::kMulticastImport, Phase::kMulticastCreated, Phase::kMulticastImported,
     OnFailure::kFailed, &Lifecycle::MulticastImport, false, nullptr},
    {Op::kMulticastJoin, Phase::kMulticastImported, Phase::kMulticastJoined, OnFailure::kFailed,
     &Lifecycle::MulticastJoin, false, nullptr},
    // Restored, but the coordinator still compares INSPECT with the state file: the
    // application waits until kActivate.
    {Op::kMulticastBind, Phase::kMulticastJoined, Phase::kRestored, OnFailure::kFailed,
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

Lifecycle::Lifecycle(LifecycleSteps& steps, QuiesceGate& gate) : steps_(steps), gate_(gate) {}

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

void Lifecycle::SetFailed(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    failure_ = message;
  }
  phase_.store(Phase::kFailed, std::memory_order_release);
  gate_.Fail();
  CUSNAP_LOG_ERROR("%s", message.c_str());
}

Result<proto::StepReply> Lifecycle::Handle(const proto::StepRequest& request) {
  const uint64_t start = MonotonicNs();
  Result<StepResult> result = Run(request);
  if (!result) return result.error();
  const proto::StepReply reply{phase(), result->bytes, result->copy_ns};
  CUSNAP_LOG_INFO("%s done: phase %s, %llu bytes in %llu ns", OpName(request.op),
                  ShimStateName(reply.state), static_cast<unsigned long long>(reply.bytes),
                  static_cast<unsigned long long>(MonotonicNs() - start));
  return reply;
}

Result<StepResult> Lifecycle::Run(const proto::StepRequest& request) {
  const Op op = request.op;
  const Phase now = phase();
  if (now == Phase::kFailed) return Refused(op, now, failure());

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

  Result<StepResult> result = (this->*row->step)(request);
  if (!result) {
    const bool destroyed = row->on_failure == OnFailure::kFailed ||
                           (row->on_failure == OnFailure::kFailedIfDestroyed &&
                            steps_.MulticastDestroyed());
    if (destroyed) {
      const Error sticky = InContext(
          ThisProcess(), std::string(OpName(op)) + " failed after memory was changed (shim FAILED)",
          result.error());
      SetFailed(sticky.message);
      return sticky;
    }
    return result;
  }
  phase_.store(row->to, std::memory_order_release);
  if (row->opens_gate) gate_.Open();
  return result;
}

namespace {

// A step that only succeeds or fails, as a step that moved nothing.
Result<StepResult> Moved(Status status) {
  if (!status) return status.error();
  return StepResult{};
}

}  // namespace

Result<StepResult> Lifecycle::Quiesce(const proto::StepRequest& request) {
  const int64_t drain_ms =
      request.drain_ms != 0 ? static_cast<int64_t>(request.drain_ms) : kDefaultDrainMs;
  if (Status closed = gate_.Close(drain_ms); !closed) return closed.error();
  // No new call passes now; the work already queued on the devices must finish before SAVE
  // reads memory. When it does not, nothing was changed: the gate reopens.
  if (Status drained = steps_.DrainDeviceWork(drain_ms); !drained) {
    gate_.Open();
    return drained.error();
  }
  return StepResult{};
}

Result<StepResult> Lifecycle::DetachMulticast(const proto::StepRequest&) {
  return Moved(steps_.DetachMulticast());
}

Result<StepResult> Lifecycle::Save(const proto::StepRequest& request) {
  Result<StepResult> result = steps_.Save();
  if (!result) {
    steps_.Discard();
    return result;
  }
  SetCheckpointId(request.checkpoint_id);
  return result;
}

Result<StepResult> Lifecycle::Release(const proto::StepRequest&) { return Moved(steps_.Release()); }

Result<StepResult> Lifecycle::Reallocate(const proto::StepRequest&) { return steps_.Reallocate(); }

Result<StepResult> Lifecycle::Import(const proto::StepRequest&) { return Moved(steps_.Import()); }

Result<StepResult> Lifecycle::MulticastCreate(const proto::StepRequest&) {
  return Moved(steps_.MulticastCreate());
}

Result<StepResult> Lifecycle::MulticastImport(const proto::StepRequest&) {
  return Moved(steps_.MulticastImport());
}

Result<StepResult> Lifecycle::MulticastJoin(const proto::StepRequest&) {
  return Moved(steps_.MulticastJoin());
}

Result<StepResult> Lifecycle::MulticastBind(const proto::StepRequest&) {
  return Moved(steps_.MulticastBind());
}

Result<StepResult> Lifecycle::Resume(const proto::StepRequest&) {
  // Detach took a multicast team apart: only a restore can put it back. Only this cycle's
  // detach counts (MulticastDestroyed keeps its value from an earlier cycle until the next
  // detach), so the question is asked in MULTICAST_DETACHED only.
  if (phase() == Phase::kMulticastDetached && steps_.MulticastDestroyed()) {
    return Refused(Op::kResume, phase(), kResumeRefusal);
  }
  steps_.Discard();
  SetCheckpointId("");
  return StepResult{};
}

Result<StepResult> Lifecycle::Activate(const proto::StepRequest&) {
  steps_.Discard();
  SetCheckpointId("");
  return StepResult{};
}

}  // namespace cusnap::shim
