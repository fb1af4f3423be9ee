// job_worker's miniature of PyTorch's NCCL watchdog and heartbeat monitor
// (docs/LONG-SUSPEND.md): a watchdog thread that makes a driver call every 20 ms and beats
// after each, and a monitor thread that never calls the driver and, like
// ProcessGroupNCCL::HeartbeatMonitor::runLoop, compares the beat count with its previous
// sample once at least `timeout_ms` passed (steady clock) and ends the process with exit
// status 97 when it did not move.
#pragma once

#include <string>

namespace jobworker {

/// Exit status of a process whose monitor found the watchdog stuck.
inline constexpr int kStuckExit = 97;

/// Starts the pair (once per process): "ok", or "bad ..." when already started.
std::string StartHeartbeat(int timeout_ms);

/// "ok <beats> <samples> <ms since the last sample>".
std::string Beats();

}  // namespace jobworker
