// Durations that come from outside a process (the environment, through the settings table
// of settings.h; the wire) and the range each may take. A value is checked where it enters,
// against its range, and refused with the range named: a shim converts milliseconds to
// nanoseconds on a signed 64-bit clock, so a
// value past its range must never reach a wait.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/messages.h"

namespace cusnap {

/// The longest lease a command may hold on a job, in ms (CUSNAP_LEASE_MS, StepRequest::
/// lease_ms): one hour. A command killed before its point of no return holds the job for at
/// most one lease, so a longer one only strands a job longer; the command renews it every
/// quarter, so any lease from 1 ms works while the command lives.
inline constexpr uint64_t kMaxLeaseMs = 3'600'000;

/// The longest a quiesce may wait for tracked calls in flight, in ms (StepRequest::drain_ms):
/// one hour.
inline constexpr uint64_t kMaxDrainMs = 3'600'000;

/// The durations a lifecycle request carries: "" when each is in its range (lease_ms 0 (no
/// lease) to kMaxLeaseMs, drain_ms 0 (the shim's default) to kMaxDrainMs), else the refusal
/// naming the field, its value and the range.
std::string StepDurationsProblem(const proto::StepRequest& request);

}  // namespace cusnap
