// Fake participants and a fake native driver for the coordinator's sequence tests, and the
// fixture that runs a command over them (FakeJobTest). Every request and driver call is
// appended to one shared log, in the order it happened, so tests can check phase order and
// barriers; a rendezvous proves that work inside a phase runs concurrently (it only completes
// when every participant is inside the phase at once).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/record/records.h"
#include "scratch_dir.h"
#include "unit/coordinator_fixtures.h"

namespace cusnap::testing {

/// One simulated job process: what its shim reports and how it answers.
struct FakeProcess {
  int pid = 0;
  uint64_t start = 0;
  uint64_t reported_start = 0;   ///< what kIdentify answers (0: same as start)
  proto::ShimState phase = proto::ShimState::kActive;
  uint64_t untracked_imports = 0;
  std::vector<proto::Record> records;
  std::vector<proto::Record> records_after_restore;  ///< INSPECT after kImport (empty: same)
  std::map<proto::Op, std::string> fail;             ///< ops answered with this error text
  int fail_code = -1;                                ///< the code of those errors
  int fail_times = 0;                                ///< > 0: the failures stop after that many
  std::map<proto::Op, uint64_t> bytes;               ///< carrier bytes reported per op
  std::map<proto::Op, proto::ShimState> phase_after;     ///< state reported after op (overrides)
  bool restored = false;
  std::string checkpoint_id;  ///< kept from kSave, reported by kIdentify, cleared on resume
  std::string device_uuids;   ///< INSPECT's device list (its own ordinals; "": none)
};

/// Shared by all fakes of one test: the log and the rendezvous.
class FakeJob {
 public:
  void Log(const std::string& entry) {
    std::lock_guard lock(mu_);
    log_.push_back(entry);
  }
  std::vector<std::string> log() {
    std::lock_guard lock(mu_);
    return log_;
  }
  /// Entries of the log that start with `prefix`.
  std::vector<std::string> Only(const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& e : log()) {
      if (e.rfind(prefix, 0) == 0) out.push_back(e);
    }
    return out;
  }

  /// Makes `op` a rendezvous of `parties`: each caller waits until all have arrived.
  void RendezvousOn(proto::Op op, size_t parties) {
    rendezvous_op_ = op;
    parties_ = parties;
  }
  /// False when the others did not arrive within a generous bound (then the phase was not
  /// concurrent: with sequential dispatch the first caller would wait forever).
  bool Arrive(proto::Op op) {
    if (parties_ == 0 || op != rendezvous_op_) return true;
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return arrived_ >= parties_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
  proto::Op rendezvous_op_{};
  size_t parties_ = 0;
  size_t arrived_ = 0;
};

class FakeParticipant final : public coord::Participant {
 public:
  FakeParticipant(FakeProcess& process, FakeJob& job) : p_(process), job_(job) {}
  int pid() const override { return p_.pid; }
  std::optional<uint64_t> start_time() const override { return p_.start; }

  Result<proto::Message> Call(const proto::Message& request, int timeout_ms) override {
    (void)timeout_ms;
    const proto::Op op = request.op;
    if (op != proto::Op::kIdentify && op != proto::Op::kCheckResources) {
      job_.Log(coord::Lowercase(proto::OpName(op)) + " " + std::to_string(p_.pid));
    }
    if (!job_.Arrive(op)) return Error{-1, "rendezvous timed out: phase not concurrent"};
    if (auto it = p_.fail.find(op); it != p_.fail.end()) {
      // A failed step keeps the state (protocol version 4), with the failure's code.
      const Error error{p_.fail_code, it->second};
      if (p_.fail_times > 0 && --p_.fail_times == 0) p_.fail.erase(it);
      return proto::EncodeError(op, error);
    }
    switch (op) {
      case proto::Op::kIdentify: {
        proto::IdentifyReply reply;
        reply.pid = p_.pid;
        reply.start_time = p_.reported_start ? p_.reported_start : p_.start;
        reply.state = p_.phase;
        reply.records = p_.records.size();
        reply.untracked_imports = p_.untracked_imports;
        reply.checkpoint_id = p_.checkpoint_id;
        return reply.Encode();
      }
      case proto::Op::kCheckResources: return proto::ResourcesReply{}.Encode();
      case proto::Op::kInspect: {
        proto::InspectReply reply;
        reply.records = p_.restored && !p_.records_after_restore.empty() ? p_.records_after_restore
                                                                         : p_.records;
        reply.device_uuids = p_.device_uuids;
        return reply.Encode();
      }
      case proto::Op::kQuiesce: p_.phase = proto::ShimState::kQuiesced; break;
      case proto::Op::kResume:
        p_.phase = proto::ShimState::kActive;
        p_.checkpoint_id.clear();
        break;
      case proto::Op::kSave:
        p_.phase = proto::ShimState::kSaved;
        if (auto step = proto::StepRequest::Decode(request); step) {
          p_.checkpoint_id = step->checkpoint_id;
        }
        break;
      case proto::Op::kDetachMulticast: p_.phase = proto::ShimState::kMulticastDetached; break;
      case proto::Op::kRelease: p_.phase = proto::ShimState::kReleased; break;
      case proto::Op::kReallocate: p_.phase = proto::ShimState::kReallocated; break;
      case proto::Op::kImport:
        p_.phase = proto::ShimState::kImported;
        p_.restored = true;
        break;
      case proto::Op::kMulticastCreate: p_.phase = proto::ShimState::kMulticastCreated; break;
      case proto::Op::kMulticastImport: p_.phase = proto::ShimState::kMulticastImported; break;
      case proto::Op::kMulticastJoin: p_.phase = proto::ShimState::kMulticastJoined; break;
      case proto::Op::kMulticastBind: p_.phase = proto::ShimState::kRestored; break;
      case proto::Op::kActivate:
        p_.phase = proto::ShimState::kActive;
        p_.checkpoint_id.clear();
        break;
      default: break;
    }
    if (auto it = p_.phase_after.find(op); it != p_.phase_after.end()) p_.phase = it->second;
    proto::StepReply reply;
    reply.state = p_.phase;
    if (auto it = p_.bytes.find(op); it != p_.bytes.end()) reply.bytes = it->second;
    return reply.Encode(op);
  }

 private:
  FakeProcess& p_;
  FakeJob& job_;
};

/// The native checkpoint API over a map of process states.
class FakeDriver final : public coord::CheckpointDriver {
 public:
  explicit FakeDriver(FakeJob& job) : job_(job) {}
  std::string Describe() const override { return "fake"; }
  bool simulated() const override { return true; }
  Result<CUprocessState> GetState(int pid) override {
    std::lock_guard lock(mu_);
    auto it = states.find(pid);
    if (fail_get_state.erase(pid) > 0) {  // once
      return Error{CUDA_ERROR_OUT_OF_MEMORY, "pid " + std::to_string(pid) +
                                                 ": cuCheckpointProcessGetState failed: "
                                                 "CUDA_ERROR_OUT_OF_MEMORY (2)"};
    }
    // As the driver answers for a process that never initialized CUDA.
    if (it == states.end()) return Error{CUDA_ERROR_INVALID_VALUE, "not a CUDA process"};
    return it->second;
  }
  Status Lock(int pid, unsigned timeout_ms) override {
    job_.Log("native_lock " + std::to_string(pid) + " timeout " + std::to_string(timeout_ms));
    return Move(pid, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
  }
  Status Checkpoint(int pid) override {
    job_.Log("native_checkpoint " + std::to_string(pid));
    return Move(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
  }
  Status Restore(int pid, std::span<const coord::UuidPair> pairs) override {
    std::string text = "native_restore " + std::to_string(pid);
    for (const auto& p : pairs) text += " " + p.from + "=" + p.to;
    job_.Log(text);
    return Move(pid, CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
  }
  Status Unlock(int pid) override {
    job_.Log("native_unlock " + std::to_string(pid));
    return Move(pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
  }
  Result<std::vector<std::string>> DeviceUuids() override {
    return std::vector<std::string>{"GPU-00000000-0000-0000-0000-000000000000",
                                    "GPU-11111111-1111-1111-1111-111111111111"};
  }
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override {
    return coord::FreeBytesUnknown(uuid);
  }
  Result<std::vector<std::string>> DeviceNames() override { return std::vector<std::string>{}; }
  bool HoldsStopped() const override { return false; }

  std::map<int, CUprocessState> states;
  std::set<int> fail_lock;
  std::multiset<int> fail_get_state;  ///< pids whose next GetState fails (once per entry)

 private:
  Status Move(int pid, CUprocessState from, CUprocessState to) {
    std::lock_guard lock(mu_);
    if (fail_lock.contains(pid) && to == CU_PROCESS_STATE_LOCKED && from == CU_PROCESS_STATE_RUNNING) {
      return Error{CUDA_ERROR_TIMEOUT, "pid " + std::to_string(pid) + ": cuCheckpointProcessLock failed: CUDA_ERROR_TIMEOUT (909)"};
    }
    if (states[pid] != from) {
      return Error{CUDA_ERROR_ILLEGAL_STATE, "pid " + std::to_string(pid) + ": illegal state"};
    }
    states[pid] = to;
    return Ok{};
  }
  FakeJob& job_;
  std::mutex mu_;
};

/// A Discoverer handing out fakes for `processes`.
inline coord::Discoverer FakeDiscoverer(std::vector<FakeProcess>& processes, FakeJob& job) {
  return [&processes, &job](coord::CheckpointDriver&)
             -> Result<std::vector<std::unique_ptr<coord::Participant>>> {
    std::vector<std::unique_ptr<coord::Participant>> out;
    for (auto& p : processes) out.push_back(std::make_unique<FakeParticipant>(p, job));
    return out;
  };
}

/// Records the phase names the observer saw, in order.
class RecordingObserver final : public coord::PhaseObserver {
 public:
  void PhaseStarted(const std::string& name, size_t) override { started.push_back(name); }
  void PhaseFinished(const coord::PhaseReport& report) override {
    finished.push_back(report.name);
    // As a SIGINT would, while the command is between this phase and the next.
    if (interrupt != nullptr && report.name == interrupt_after && !answer) {
      answer = interrupt->Request();
    }
  }
  std::vector<std::string> started, finished;
  /// When set: Request() on it once the phase named interrupt_after finished; its answer.
  coord::Interrupt* interrupt = nullptr;
  std::string interrupt_after;
  std::optional<coord::Interrupt::Answer> answer;
};

/// A command over the fakes of the valid job (ValidJob), with a scratch directory (dir_) for its
/// state file: SetUp makes a fake process of each participant, every one running on the fake
/// driver, pid 100 saving the 2 MiB allocation it created. A derived fixture's SetUp calls
/// this one first (and returns on a fatal failure).
class FakeJobTest : public ScratchDirTest {
 protected:
  explicit FakeJobTest(std::string name) : ScratchDirTest(std::move(name)) {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    if (HasFatalFailure()) return;
    for (const auto& v : ValidJob()) {
      FakeProcess p;
      p.pid = v.pid;
      p.start = v.start_time;
      p.records = v.records;
      processes_.push_back(p);
      driver_.states[v.pid] = CU_PROCESS_STATE_RUNNING;
    }
    processes_[0].bytes[proto::Op::kSave] = kMiB2;
  }

  std::vector<FakeProcess> processes_;
  FakeJob job_;
  FakeDriver driver_{job_};
};

}  // namespace cusnap::testing
