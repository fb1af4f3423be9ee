// Shared phase plumbing of the checkpoint and restore sequences (sequence.h).
#include "coordinator/sequence.h"

#include <atomic>

#include "common/text.h"
#include "coordinator/records.h"

namespace cusnap::coord {

void Sequence::NoteCopy(uint64_t copy_ns) {
  uint64_t seen = phase_copy_ns_.load();
  while (copy_ns > seen && !phase_copy_ns_.compare_exchange_weak(seen, copy_ns)) {
  }
}

void Sequence::NoteInterrupted() {
  report_.interrupted = true;
  report_.errors.push_back(
      "interrupted: stopped " +
      (report_.phases.empty() ? std::string("before its first phase")
                              : "after phase '" + report_.phases.back().name + "'") +
      ", before anything was changed for good");
}

bool Sequence::Record(PhaseReport phase) {
  phase.copy_ns = phase_copy_ns_.exchange(0);
  observer_.PhaseFinished(phase);
  report_.errors.insert(report_.errors.end(), phase.errors.begin(), phase.errors.end());
  const bool ok = phase.ok();
  report_.phases.push_back(std::move(phase));
  return ok;
}

bool Sequence::Phase(const std::string& name, const PhaseWork& work, uint64_t expected_bytes,
                     const std::string& note) {
  observer_.PhaseStarted(name, participants_.size());
  std::atomic<uint64_t> moved{0};
  PhaseReport phase =
      expected_bytes == 0
          ? RunPhase(name, participants_.size(), work)
          : RunPhase(name, participants_.size(), [&](size_t i) -> Result<uint64_t> {
              auto bytes = work(i);
              if (bytes) observer_.BytesMoved(name, moved += *bytes, expected_bytes);
              return bytes;
            });
  phase.note = note;
  return Record(std::move(phase));
}

bool Sequence::LocalPhase(const std::string& name, const std::function<Result<uint64_t>()>& work) {
  observer_.PhaseStarted(name, participants_.size());
  PhaseReport phase = RunLocalPhase(name, participants_.size(), work);
  phase.coordinator_only = true;
  return Record(std::move(phase));
}

bool Sequence::CheckPhase(const std::string& name,
                          const std::function<std::vector<std::string>()>& check) {
  observer_.PhaseStarted(name, participants_.size());
  std::vector<std::string> problems;
  PhaseReport phase = RunLocalPhase(name, 0, [&]() -> Result<uint64_t> {
    problems = check();
    return uint64_t{0};
  });
  phase.participants = participants_.size();  // discovery fills participants_ as it runs
  phase.errors.insert(phase.errors.end(), problems.begin(), problems.end());
  return Record(std::move(phase));
}

bool Sequence::LifecyclePhase(proto::Op op, uint64_t expected_bytes, const std::string& note,
                              std::optional<proto::ShimState> leaves) {
  return Phase(Lowercase(proto::OpName(op)), [&](size_t i) -> Result<uint64_t> {
    auto step = Step(*participants_[i], op);
    if (!step) return step.error();
    if (leaves && step->state != *leaves) {
      return Error{-1, ProcessText(participants_[i]->pid()) + ": after " +
                           Lowercase(proto::OpName(op)) + " its cusnap shim is " +
                           Lowercase(proto::ShimStateName(step->state)) + ", not " +
                           Lowercase(proto::ShimStateName(*leaves))};
    }
    NoteCopy(step->copy_ns);
    return step->bytes;
  }, expected_bytes, note);
}

bool Sequence::DiscoverPhase() {
  return CheckPhase("discover", [&]() -> std::vector<std::string> {
    auto found = discover_(driver_);
    if (!found) return {found.error().message};
    participants_ = std::move(*found);
    identities_.assign(participants_.size(), Identity{});
    native_.assign(participants_.size(), 0);
    PhaseReport identify = RunPhase("identify", participants_.size(), [&](size_t i) -> Result<uint64_t> {
      auto id = Identify(*participants_[i]);
      if (!id) return id.error();
      const auto start = participants_[i]->start_time();
      if (!start || *start != id->start_time) {
        return Error{-1, ProcessText(id->pid) + ": its endpoint reports start time " +
                             std::to_string(id->start_time) + " but the process started at " +
                             (start ? std::to_string(*start) : std::string("(gone)")) +
                             " (a stale endpoint of a reused pid?)"};
      }
      // Decided now, before anything changes: a process the driver does not know (it never
      // initialized CUDA) gets no native calls.
      native_[i] = driver_.GetState(id->pid).ok() ? 1 : 0;
      identities_[i] = std::move(*id);
      return uint64_t{0};
    });
    return identify.errors;
  });
}

Status Sequence::InspectInto(std::vector<ParticipantView>& views, size_t index) {
  auto inspected = InspectWithImporters(*participants_[index]);
  if (!inspected) return inspected.error();
  auto& v = views[index];
  v.pid = identities_[index].pid;
  v.start_time = identities_[index].start_time;
  v.untracked_imports = identities_[index].untracked_imports;
  v.untracked = identities_[index].untracked;
  v.records = std::move(inspected->records);
  v.importers = std::move(inspected->importers);
  return Ok{};
}

}  // namespace cusnap::coord
