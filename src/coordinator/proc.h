// What the coordinator reads about processes from /proc: start times (to tell a process
// from a later one that reused its pid), liveness, and the process tree under a pid.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cusnap::coord {

/// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22), or nullopt
/// when the process does not exist. The same value the shim reports in kIdentify.
std::optional<uint64_t> ProcessStartTime(int pid);

/// `pid` followed by every descendant (children of every thread, recursively, from
/// /proc/<pid>/task/<tid>/children), parents before children. Processes that exit during
/// the walk are skipped. Empty when `pid` does not exist.
std::vector<int> ProcessTree(int pid);

/// Pids that have an endpoint socket "<pid>.sock" in `control_dir` and are alive. Stale
/// sockets of dead processes are ignored.
std::vector<int> EndpointPids(const std::string& control_dir);

/// Pids whose endpoint socket "<pid>.sock" is still in `control_dir` though the process no
/// longer exists (it died without removing it): `cusnap status` lists them as stale.
std::vector<int> StaleEndpointPids(const std::string& control_dir);

/// True when <control_dir>/<pid>.sock exists and is a socket (an endpoint, live or stale).
bool HasEndpoint(const std::string& control_dir, int pid);

/// The pids of `pid`'s process tree (ProcessTree order) that have an endpoint, leaving out
/// the calling process.
std::vector<int> EndpointPidsInTree(const std::string& control_dir, int pid);

/// The command name of `pid` (/proc/<pid>/comm), "?" when unreadable; for messages.
std::string ProcessName(int pid);

}  // namespace cusnap::coord
