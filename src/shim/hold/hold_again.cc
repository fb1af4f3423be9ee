// The hold-again timing (hold_again.h).
#include "shim/hold/hold_again.h"

#include <algorithm>

#include "common/saturating.h"

namespace cusnap::shim {

void HoldAgainClock::Arm(bool armed, uint64_t now_ns) {
  armed_ = armed;
  activity_ns_ = now_ns;
}

uint64_t HoldAgainClock::GraceNs(uint64_t lease_ns) {
  return lease_ns != 0 ? lease_ns : SaturatingMsToNs(kDefaultHoldGraceMs);
}

uint64_t HoldAgainClock::GapNs(uint64_t lease_ns) {
  return std::clamp<uint64_t>(GraceNs(lease_ns) / 8, 50'000'000, 1'000'000'000);
}

bool HoldAgainClock::Due(uint64_t now_ns, uint64_t lease_ns, bool request_running) {
  if (!armed_) return false;
  // A tick later than the gap: the process was stopped in between and someone (a command, or
  // a user) continued it just now; a command that did is at work from then on.
  if (planned_wake_ns_ != 0 && now_ns > SaturatingAdd(planned_wake_ns_, GapNs(lease_ns))) {
    activity_ns_ = now_ns;
  }
  return !request_running && now_ns >= SaturatingAdd(activity_ns_, GraceNs(lease_ns));
}

std::optional<uint64_t> HoldAgainClock::Take(uint64_t now_ns, uint64_t lease_ns,
                                             bool request_running) {
  if (!armed_ || request_running || now_ns < SaturatingAdd(activity_ns_, GraceNs(lease_ns))) {
    return std::nullopt;
  }
  const uint64_t quiet_ns = now_ns - activity_ns_;
  activity_ns_ = now_ns;
  return quiet_ns;
}

}  // namespace cusnap::shim
