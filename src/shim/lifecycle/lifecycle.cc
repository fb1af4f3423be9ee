// The lifecycle's state machine (lifecycle.h): one table, a row per transition, each with
// the step it runs. The work of each step lives in LifecycleSteps; this file only decides
// whether a request may run now, runs it, and moves the state.
#include "shim/lifecycle/lifecycle.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>

#include "common/log.h"
#include "shim/lifecycle/hold_guard.h"
#include "shim/lifecycle/lifecycle_common.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

using proto::Op;
using Phase = proto::ShimState;

// What a failed step leaves behind. Either way the state stays where it was (the step undid
// its partial work or can be run again: a sticky FAILED, as in SPEC-REFERENCE K.3 #15, would
// strand the job) and the failure is kept for `status`.
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

Lifecycle::Lifecycle(LifecycleSteps& steps, QuiesceGate& gate, std::string held_marker)
    : steps_(steps), gate_(gate), held_marker_(std::move(held_marker)) {}

Lifecycle::~Lifecycle() {
  bool started = false;
  {
    std::lock_guard lock(lease_mutex_);
    stop_ = true;
    started = watcher_started_;
    lease_changed_.notify_all();
  }
  if (started) pthread_join(watcher_, nullptr);
}

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
  SuspendLease();
  const uint64_t start = MonotonicNs();
  Result<StepResult> result = request.op == Op::kRenew ? Result<StepResult>(StepResult{})
                                                       : Run(request);
  RenewLease(request.lease_ms);
  if (!result) return result.error();
  const proto::StepReply reply{phase(), result->bytes, result->copy_ns, result->zero_bytes};
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
  if (row->on_failure == OnFailure::kDestructiveIfDestroyed && steps_.MulticastDestroyed()) {
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
      SetFailure(kept.message);
      CUSNAP_LOG_ERROR("%s", kept.message.c_str());
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

void Lifecycle::SuspendLease() {
  std::lock_guard lock(lease_mutex_);
  lease_deadline_ns_ = 0;
  ++lease_generation_;
  request_running_ = true;
  activity_ns_ = MonotonicNs();
}

void Lifecycle::RenewLease(uint64_t lease_ms) {
  std::lock_guard lock(lease_mutex_);
  ++lease_generation_;
  request_running_ = false;
  activity_ns_ = MonotonicNs();
  if (lease_ms == 0) return;  // no lease: held until a request moves the state
  lease_ms_ = lease_ms;
  lease_deadline_ns_ = MonotonicNs() + lease_ms * 1'000'000;
  StartWatcher();
  lease_changed_.notify_all();
}

void Lifecycle::StartWatcher() {
  if (watcher_started_) return;
  watcher_started_ = StartQuietThread(
      &watcher_,
      [](void* self) -> void* {
        static_cast<Lifecycle*>(self)->WatchLease();
        return nullptr;
      },
      this);
  // Without the watcher a lease never runs out: the job stays as the last command left it
  // (nothing is lost) but is not held again should the CLI vanish. Said, and retried at the
  // next renewal or arming.
  if (!watcher_started_) {
    CUSNAP_LOG_WARN("%s: no thread could be started to watch the lease; the job is not held "
                    "again on its own until one can",
                    ThisProcess().c_str());
  }
}

void Lifecycle::WatchLease() {
  std::unique_lock lock(lease_mutex_);
  while (!stop_) {
    const uint64_t now = MonotonicNs();
    if (hold_armed_ && HoldDue(now)) {
      lock.unlock();
      HoldAgain();
      lock.lock();
      continue;
    }
    if (lease_deadline_ns_ != 0 && now >= lease_deadline_ns_) {
      const uint64_t generation = lease_generation_;
      lease_deadline_ns_ = 0;
      lock.unlock();
      ExpireLease(generation);
      lock.lock();
      continue;
    }
    uint64_t wake = lease_deadline_ns_;  // 0: no bound
    if (hold_armed_) {
      const uint64_t tick = now + HoldTickNs();
      wake = wake == 0 ? tick : std::min(wake, tick);
    }
    planned_wake_ns_ = wake;
    if (wake == 0) {
      lease_changed_.wait(lock);
    } else {
      lease_changed_.wait_for(lock, std::chrono::nanoseconds(wake - now));
    }
  }
}

void Lifecycle::ArmHold(bool held) {
  std::lock_guard lock(lease_mutex_);
  hold_armed_ = held && !held_marker_.empty();
  activity_ns_ = MonotonicNs();
  if (hold_armed_) StartWatcher();
  lease_changed_.notify_all();
}

uint64_t Lifecycle::HoldGraceNs() const {
  return (lease_ms_ != 0 ? lease_ms_ : kDefaultHoldGraceMs) * 1'000'000;
}

uint64_t Lifecycle::HoldGapNs() const {
  // An eighth of the lease, within [50 ms, 1 s]: a stop this short goes unseen, and the lease
  // left to a command that just continued the process is then still 0.75 - 3/16 of it (a
  // renewal comes every quarter lease, the tick is half the gap).
  const uint64_t eighth = HoldGraceNs() / 8;
  return std::clamp<uint64_t>(eighth, 50'000'000, 1'000'000'000);
}

uint64_t Lifecycle::HoldTickNs() const { return HoldGapNs() / 2; }

bool Lifecycle::HoldDue(uint64_t now_ns) {
  // A tick later than the gap: the process was stopped in between and someone (a command, or
  // a user) continued it just now; a command that did is at work from then on.
  if (planned_wake_ns_ != 0 && now_ns > planned_wake_ns_ + HoldGapNs()) activity_ns_ = now_ns;
  return !request_running_ && now_ns >= activity_ns_ + HoldGraceNs();
}

void Lifecycle::HoldAgain() {
  std::lock_guard run(run_mutex_);  // never in the middle of a request
  uint64_t quiet_ms = 0;
  {
    std::lock_guard lock(lease_mutex_);
    // A request that came while this waited for run_mutex_ is activity.
    const uint64_t now = MonotonicNs();
    if (!hold_armed_ || request_running_ || now < activity_ns_ + HoldGraceNs()) return;
    quiet_ms = (now - activity_ns_) / 1'000'000;
    activity_ns_ = now;
  }
  const Phase now = phase();
  if (now == Phase::kActive) return;
  CUSNAP_LOG_WARN("%s is checkpointed (phase %s) and ran %llu ms with no cusnap command at work "
                  "(the command at work on it ended before activate): stopped "
                  "again to hold the job; 'cusnap restore' continues it and goes on",
                  ThisProcess().c_str(), ShimStateName(now),
                  static_cast<unsigned long long>(quiet_ms));
  if (Status held = HoldThisProcess(held_marker_, ShimStateName(now)); !held) {
    CUSNAP_LOG_ERROR("%s: cannot hold it again: %s", ThisProcess().c_str(),
                     held.error().message.c_str());
  }
}

void Lifecycle::ExpireLease(uint64_t generation) {
  std::lock_guard run(run_mutex_);
  {
    std::lock_guard lock(lease_mutex_);
    if (generation != lease_generation_) return;  // a request came meanwhile
  }
  const Phase now = phase();
  if (now != Phase::kQuiesced && now != Phase::kSaved) return;
  if (committed_ || destroyed_) {
    CUSNAP_LOG_WARN("the command's lease expired in phase %s after its point of no return: "
                    "application calls wait until 'cusnap recover' or 'cusnap restore'",
                    ShimStateName(now));
    return;
  }
  GateBypass bypass;  // Discard may pass through the shim's own hooks
  steps_.Discard();
  SetCheckpointId("");
  const std::string why = ThisProcess() + ": the command holding this process sent nothing for " +
                          std::to_string(lease_ms_) + " ms (its lease expired) in phase " +
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

Result<StepResult> Lifecycle::Release(const proto::StepRequest& request) {
  // From here until activate the process is checkpointed and may be held stopped: a
  // hangup or a stray SIGCONT must not end or continue it (hold_guard.h).
  if (!held_marker_.empty()) ArmHoldGuard(held_marker_);
  ArmHold(request.held);
  return Moved(steps_.Release());
}

Result<StepResult> Lifecycle::Reallocate(const proto::StepRequest& request) {
  // Onto other GPUs: the steps rebuild on the recorded ordinals, so each must name the GPU
  // the map moved its old GPU to (the driver keeps ordinals, DRIVER-FACTS F7b).
  if (!request.device_map.empty()) {
    if (Status moved = steps_.CheckDevicesAfterMove(request.device_map); !moved) {
      return moved.error();
    }
  }
  return steps_.Reallocate();
}

Result<StepResult> Lifecycle::WriteCarrier(const proto::StepRequest& request) {
  if (request.carrier_path.empty()) return Error{EINVAL, ThisProcess() + ": WRITE_CARRIER names no file"};
  return steps_.WriteCarrier(request.carrier_path);
}

Result<StepResult> Lifecycle::ReadCarrier(const proto::StepRequest& request) {
  // "": from where the files were written.
  return steps_.ReadCarrier(request.carrier_path);
}

Result<StepResult> Lifecycle::Import(const proto::StepRequest&) { return Moved(steps_.Import()); }

Result<StepResult> Lifecycle::MulticastCreate(const proto::StepRequest& request) {
  steps_.DropMulticast(request.dropped_multicast);
  return Moved(steps_.MulticastCreate());
}

Result<StepResult> Lifecycle::MulticastImport(const proto::StepRequest& request) {
  steps_.DropMulticast(request.dropped_multicast);
  return Moved(steps_.MulticastImport());
}

Result<StepResult> Lifecycle::MulticastJoin(const proto::StepRequest& request) {
  steps_.DropMulticast(request.dropped_multicast);
  return Moved(steps_.MulticastJoin());
}

Result<StepResult> Lifecycle::MulticastBind(const proto::StepRequest& request) {
  steps_.DropMulticast(request.dropped_multicast);
  return Moved(steps_.MulticastBind());
}

Result<StepResult> Lifecycle::Commit(const proto::StepRequest&) {
  committed_ = true;
  return StepResult{};
}

Result<StepResult> Lifecycle::Resume(const proto::StepRequest&) {
  // Detach took a multicast team apart, or a release began: only a roll forward can put
  // them back (destroyed_ covers this cycle only).
  if (destroyed_) return Refused(Op::kResume, phase(), kResumeRefusal);
  steps_.Discard();
  SetCheckpointId("");
  return StepResult{};
}

Result<StepResult> Lifecycle::Activate(const proto::StepRequest&) {
  DisarmHoldGuard();
  ArmHold(false);
  steps_.Discard();
  SetCheckpointId("");
  return StepResult{};
}

}  // namespace cusnap::shim
