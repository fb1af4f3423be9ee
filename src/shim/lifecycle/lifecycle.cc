// The lifecycle's state machine (lifecycle.h): one table, a row per transition, each with
// the step it runs. The work of each step lives in LifecycleSteps; this file only decides
// whether a request may run now, runs it, and moves the state.
#include "shim/lifecycle/lifecycle.h"

#include <unistd.h>

#include <ctime>

#include "common/log.h"
#include "common/socket.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

using proto::Op;
using proto::Phase;

// What a failed step leaves behind.
enum class OnFailure {
  kStateKept,          // nothing changed in the application's memory: the state stays
  kFailed,             // memory was changed: the shim is FAILED for good
  kFailedIfDestroyed,  // FAILED only when the step took a multicast team apart
};

constexpr const char* kResumeRefusal =
    "only a checkpoint that released nothing (no unicast memory, no multicast team) can resume";

Error Refused(Op op, Phase now, const std::string& why) {
  return Error{-1, ThisProcess() + ": " + OpName(op) + " refused in phase " + PhaseName(now) +
                       ": " + why};
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
  Result<StepResult> (Lifecycle::*step)(const proto::Header& request);
  bool opens_gate;
  const char* out_of_order;
};

constexpr Lifecycle::Transition Lifecycle::kTransitions[] = {
    // checkpoint
    {Op::kQuiesce, Phase::kActive, Phase::kQuiesced, OnFailure::kStateKept,
     &Lifecycle::Quiesce, false, nullptr},
    {Op::kDetachMulticast, Phase::kQuiesced, Phase::kMulticastDetached,
     OnFailure::kFailedIfDestroyed, &Lifecycle::DetachMulticast, false, nullptr},
    {Op::kSave, Phase::kMulticastDetached, Phase::kSaved, OnFailure::kStateKept,
     &Lifecycle::Save, false, nullptr},
    {Op::kRelease, Phase::kSaved, Phase::kReleased, OnFailure::kFailed, &Lifecycle::Release,
     false, nullptr},
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
    {Op::kResume, Phase::kMulticastDetached, Phase::kActive, OnFailure::kStateKept,
     &Lifecycle::Resume, true, kResumeRefusal},
    {Op::kResume, Phase::kSaved, Phase::kActive, OnFailure::kStateKept, &Lifecycle::Resume, true,
     kResumeRefusal},
};

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kActive: return "ACTIVE";
    case Phase::kQuiesced: return "QUIESCED";
    case Phase::kMulticastDetached: return "MULTICAST_DETACHED";
    case Phase::kSaved: return "SAVED";
    case Phase::kReleased: return "RELEASED";
    case Phase::kReallocated: return "REALLOCATED";
    case Phase::kImported: return "IMPORTED";
    case Phase::kMulticastCreated: return "MULTICAST_CREATED";
    case Phase::kMulticastImported: return "MULTICAST_IMPORTED";
    case Phase::kMulticastJoined: return "MULTICAST_JOINED";
    case Phase::kFailed: return "FAILED";
    case Phase::kRestored: return "RESTORED";
  }
  return "UNKNOWN";
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kExport: return "EXPORT";
    case Op::kIdentify: return "IDENTIFY";
    case Op::kInspect: return "INSPECT";
    case Op::kQuiesce: return "QUIESCE";
    case Op::kDetachMulticast: return "DETACH_MULTICAST";
    case Op::kSave: return "SAVE";
    case Op::kRelease: return "RELEASE";
    case Op::kReallocate: return "REALLOCATE";
    case Op::kImport: return "IMPORT";
    case Op::kMulticastCreate: return "MULTICAST_CREATE";
    case Op::kMulticastImport: return "MULTICAST_IMPORT";
    case Op::kMulticastJoin: return "MULTICAST_JOIN";
    case Op::kMulticastBind: return "MULTICAST_BIND";
    case Op::kResume: return "RESUME";
    case Op::kActivate: return "ACTIVATE";
  }
  return "UNKNOWN";
}

Lifecycle::Lifecycle(LifecycleSteps& steps, QuiesceGate& gate) : steps_(steps), gate_(gate) {}

std::string Lifecycle::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
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

proto::Header Lifecycle::Handle(const proto::Header& request) {
  const Op op = static_cast<Op>(request.op);
  proto::Header reply = MakeHeader(op);
  const uint64_t start = MonotonicNs();
  Result<StepResult> result = Run(op, request);
  reply.phase = static_cast<uint32_t>(phase());
  reply.arg[1] = MonotonicNs() - start;
  if (!result) {
    reply.status = result.error().code == 0 ? -1 : result.error().code;
    SetHeaderText(reply, result.error().message);
    return reply;
  }
  reply.arg[0] = result->bytes;
  reply.arg[2] = result->copy_ns;
  reply.arg[3] = result->register_ns;
  reply.arg[4] = result->provision_ns;
  CUSNAP_LOG_INFO("%s done: phase %s, %llu bytes in %llu ns", OpName(op), PhaseName(phase()),
                  static_cast<unsigned long long>(reply.arg[0]),
                  static_cast<unsigned long long>(reply.arg[1]));
  return reply;
}

Result<StepResult> Lifecycle::Run(Op op, const proto::Header& request) {
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
                                : std::string("it needs phase ") + PhaseName(any->from));
  }

  Result<StepResult> result = (this->*row->step)(request);
  if (!result) {
    const bool destroyed = row->on_failure == OnFailure::kFailed ||
                           (row->on_failure == OnFailure::kFailedIfDestroyed &&
                            steps_.MulticastDestroyed());
    if (destroyed) {
      // The step's text names this process already, most of the time: said once, so that
      // the rest fits in a reply (protocol.h: 184 bytes of text).
      std::string why = result.error().message;
      if (why.rfind(ThisProcess() + ": ", 0) == 0) why.erase(0, ThisProcess().size() + 2);
      Error sticky{result.error().code, ThisProcess() + ": " + OpName(op) +
                                            " failed after memory was changed (shim FAILED): " +
                                            why};
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

Result<StepResult> Lifecycle::Quiesce(const proto::Header& request) {
  const int64_t drain_ms =
      request.arg[0] != 0 ? static_cast<int64_t>(request.arg[0]) : kDefaultDrainMs;
  return Moved(gate_.Close(drain_ms));
}

Result<StepResult> Lifecycle::DetachMulticast(const proto::Header&) {
  return Moved(steps_.DetachMulticast());
}

Result<StepResult> Lifecycle::Save(const proto::Header&) {
  Result<StepResult> result = steps_.Save();
  if (!result) steps_.Discard();
  return result;
}

Result<StepResult> Lifecycle::Release(const proto::Header&) { return Moved(steps_.Release()); }

Result<StepResult> Lifecycle::Reallocate(const proto::Header&) { return steps_.Reallocate(); }

Result<StepResult> Lifecycle::Import(const proto::Header&) { return Moved(steps_.Import()); }

Result<StepResult> Lifecycle::MulticastCreate(const proto::Header&) {
  return Moved(steps_.MulticastCreate());
}

Result<StepResult> Lifecycle::MulticastImport(const proto::Header&) {
  return Moved(steps_.MulticastImport());
}

Result<StepResult> Lifecycle::MulticastJoin(const proto::Header&) {
  return Moved(steps_.MulticastJoin());
}

Result<StepResult> Lifecycle::MulticastBind(const proto::Header&) {
  return Moved(steps_.MulticastBind());
}

Result<StepResult> Lifecycle::Resume(const proto::Header&) {
  // Detach took a multicast team apart: only a restore can put it back.
  if (phase() != Phase::kQuiesced && steps_.MulticastDestroyed()) {
    return Refused(Op::kResume, phase(), kResumeRefusal);
  }
  steps_.Discard();
  return StepResult{};
}

Result<StepResult> Lifecycle::Activate(const proto::Header&) {
  steps_.Discard();
  return StepResult{};
}

}  // namespace cusnap::shim
