// `cusnap status` data: identity and table counts of every participant (coordinator.h).
#include "coordinator/coordinator.h"
#include "coordinator/hold.h"
#include "coordinator/proc.h"

namespace cusnap::coord {

std::vector<ParticipantStatus> CollectStatus(std::vector<std::unique_ptr<Participant>>& participants,
                                             std::vector<std::string>& errors) {
  std::vector<ParticipantStatus> out(participants.size());
  RunPhase("status", participants.size(), [&](size_t i) -> Result<uint64_t> {
    // A held process is stopped: its endpoint would not answer before the deadline.
    const std::string endpoint = participants[i]->endpoint();
    const int pid = participants[i]->pid();
    const std::string control_dir = endpoint.substr(0, endpoint.rfind('/'));
    if (!endpoint.empty() && IsHeld(control_dir, pid)) {
      out[i].identity.pid = pid;
      out[i].identity.start_time = ProcessStartTime(pid).value_or(0);
      // A shim that held itself names its phase in its marker (a restore that continued it
      // was killed, maybe half way): "released" would hide where it stopped.
      const auto phase = HeldPhase(control_dir, pid);
      out[i].identity.state = phase.value_or(proto::ShimState::kReleased);
      // Its memory is released only while it is RELEASED: a restore killed half way left
      // it reallocated, or further.
      const bool released = !phase || *phase == proto::ShimState::kReleased;
      out[i].held =
          std::string(phase ? "held: stopped again by itself (no cusnap command was at work on "
                              "it for a lease)"
                            : "held: stopped by the 'cusnap checkpoint' or 'cusnap dump' that "
                              "released its memory") +
          (released ? "" : "; its memory is back on the GPU, the restore unfinished") +
          "; 'cusnap restore' (or 'cusnap recover') continues it and goes on" +
          (phase ? "" : " (CUSNAP_HOLD=run keeps such a job running)") +
          "; its tables were not read (the process is stopped)";
      return uint64_t{0};
    }
    if (const auto state = StoppedState(pid)) {
      out[i].unreachable = StoppedProcessText(control_dir, pid, *state);
      return uint64_t{0};
    }
    auto id = Identify(*participants[i]);
    if (!id) {
      out[i].unreachable = id.error().message;
      return uint64_t{0};
    }
    out[i].identity = std::move(*id);
    auto records = Inspect(*participants[i]);
    if (!records) {
      out[i].inspect_error = records.error().message;
      return uint64_t{0};
    }
    for (const auto& r : *records) {
      if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation)) {
        ++out[i].allocations;
        if (r.flags & proto::kCreator) ++out[i].created;
      } else if (r.kind == static_cast<uint32_t>(proto::RecordKind::kMapping)) {
        ++out[i].mappings;
      }
    }
    return uint64_t{0};
  });
  for (size_t i = 0; i < participants.size(); ++i) {
    if (out[i].unreachable.empty()) continue;
    out[i].identity.pid = participants[i]->pid();
    out[i].identity.start_time = ProcessStartTime(out[i].identity.pid).value_or(0);
    errors.push_back(out[i].unreachable);
  }
  return out;
}

}  // namespace cusnap::coord
