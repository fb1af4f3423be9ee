// The lifecycle's transition rules (lifecycle.h). The work of each step lives in
// LifecycleSteps; this file only decides whether a request may run now, runs it, and moves
// the phase.
#include "shim/lifecycle/lifecycle.h"

#include <unistd.h>

#include <ctime>

#include "common/log.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

using proto::Op;
using Phase = proto::ShimState;

// One row per step: the phase it must find, the phase it leaves, and whether a failure in
// it has already changed the application's memory (then the shim is FAILED for good).
struct Transition {
  Op op;
  Phase from;
  Phase to;
  bool destructive;
};

constexpr Transition kTransitions[] = {
    {Op::kQuiesce, Phase::kActive, Phase::kQuiesced, false},
    {Op::kDetachMulticast, Phase::kQuiesced, Phase::kMulticastDetached, true},
    {Op::kSave, Phase::kMulticastDetached, Phase::kSaved, false},
    {Op::kRelease, Phase::kSaved, Phase::kReleased, true},
    {Op::kReallocate, Phase::kReleased, Phase::kReallocated, true},
    {Op::kImport, Phase::kReallocated, Phase::kImported, true},
    {Op::kMulticastCreate, Phase::kImported, Phase::kMulticastCreated, true},
    {Op::kMulticastImport, Phase::kMulticastCreated, Phase::kMulticastImported, true},
    {Op::kMulticastJoin, Phase::kMulticastImported, Phase::kMulticastJoined, true},
    {Op::kMulticastBind, Phase::kMulticastJoined, Phase::kActive, true},
};

const Transition* Find(Op op) {
  for (const Transition& t : kTransitions) {
    if (t.op == op) return &t;
  }
  return nullptr;
}

// kResume may undo a checkpoint until unicast memory is released and as long as detach took
// no multicast team apart (`multicast_destroyed`).
bool Resumable(Phase phase, bool multicast_destroyed) {
  if (phase == Phase::kQuiesced) return true;
  return (phase == Phase::kMulticastDetached || phase == Phase::kSaved) && !multicast_destroyed;
}

}  // namespace

Lifecycle::Lifecycle(LifecycleSteps& steps, QuiesceGate& gate) : steps_(steps), gate_(gate) {}

std::string Lifecycle::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

bool Lifecycle::awaiting_activation() const {
  std::lock_guard lock(mutex_);
  return awaiting_activation_;
}

void Lifecycle::SetFailed(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    failure_ = message;
    awaiting_activation_ = false;
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
  const auto refuse = [&](const char* why) -> Error {
    return Error{-1, ThisProcess() + ": " + OpName(op) + " refused in phase " +
                         ShimStateName(now) + ": " + why};
  };
  if (now == Phase::kFailed) return refuse(failure().c_str());

  if (op == Op::kResume) {
    if (!Resumable(now, steps_.MulticastDestroyed())) {
      return refuse("only a checkpoint that released nothing (no unicast memory, no multicast "
                    "team) can resume");
    }
    steps_.Discard();
    phase_.store(Phase::kActive, std::memory_order_release);
    gate_.Open();
    return StepResult{};
  }
  if (op == Op::kActivate) {
    if (now != Phase::kActive) return refuse("the restore has not finished");
    {
      std::lock_guard lock(mutex_);
      awaiting_activation_ = false;
    }
    steps_.Discard();
    gate_.Open();
    return StepResult{};
  }

  const Transition* step = Find(op);
  if (step == nullptr) return refuse("not a lifecycle step");
  if (now != step->from) {
    return refuse((std::string("it needs phase ") + ShimStateName(step->from)).c_str());
  }
  if (op == Op::kQuiesce && awaiting_activation()) {
    return refuse("the last restore is waiting for ACTIVATE");
  }

  Result<StepResult> result = StepResult{};
  switch (op) {
    case Op::kQuiesce: {
      const int64_t drain_ms =
          request.drain_ms != 0 ? static_cast<int64_t>(request.drain_ms) : kDefaultDrainMs;
      if (Status closed = gate_.Close(drain_ms); !closed) result = closed.error();
      break;
    }
    case Op::kDetachMulticast:
      if (Status s = steps_.DetachMulticast(); !s) result = s.error();
      break;
    case Op::kSave:
      result = steps_.Save();
      if (!result) steps_.Discard();
      break;
    case Op::kRelease:
      if (Status s = steps_.Release(); !s) result = s.error();
      break;
    case Op::kReallocate:
      result = steps_.Reallocate();
      break;
    case Op::kImport:
      if (Status s = steps_.Import(); !s) result = s.error();
      break;
    case Op::kMulticastCreate:
      if (Status s = steps_.MulticastCreate(); !s) result = s.error();
      break;
    case Op::kMulticastImport:
      if (Status s = steps_.MulticastImport(); !s) result = s.error();
      break;
    case Op::kMulticastJoin:
      if (Status s = steps_.MulticastJoin(); !s) result = s.error();
      break;
    case Op::kMulticastBind:
      if (Status s = steps_.MulticastBind(); !s) result = s.error();
      break;
    default:
      break;
  }
  if (!result) {
    // A detach that undid its own work destroyed nothing (multicast_steps.h).
    const bool destroyed =
        op == Op::kDetachMulticast ? steps_.MulticastDestroyed() : step->destructive;
    if (destroyed) {
      const Error sticky = InContext(
          ThisProcess(), std::string(OpName(op)) + " failed after memory was changed (shim FAILED)",
          result.error());
      SetFailed(sticky.message);
      return sticky;
    }
    return result;
  }
  if (op == Op::kMulticastBind) {
    // Restored, but the coordinator still compares INSPECT with the state file: the
    // application waits until kActivate.
    std::lock_guard lock(mutex_);
    awaiting_activation_ = true;
  }
  phase_.store(step->to, std::memory_order_release);
  return result;
}

}  // namespace cusnap::shim
