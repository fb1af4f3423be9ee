// `cusnap status` data: identity and table counts of every participant (coordinator.h).
#include "coordinator/coordinator.h"
#include "coordinator/participants/hold.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {

std::vector<ParticipantStatus> CollectStatus(std::vector<std::unique_ptr<Participant>>& participants,
                                             std::vector<std::string>& errors) {
  std::vector<ParticipantStatus> out(participants.size());
  RunPhase("status", participants.size(), [&](size_t i) -> Result<uint64_t> {
    // A held process is stopped: its endpoint would not answer before the deadline.
    const std::string endpoint = participants[i]->endpoint();
    const int pid = participants[i]->pid();
    const std::string control_dir = endpoint.substr(0, endpoint.rfind('/'));
    if (const auto held = endpoint.empty() ? std::nullopt : HeldStatus(control_dir, pid)) {
      out[i].identity.pid = pid;
      out[i].identity.start_time = ProcessStartTime(pid).value_or(0);
      out[i].identity.state = held->state;
      out[i].held = held->text;
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
