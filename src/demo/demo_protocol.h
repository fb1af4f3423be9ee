// What `cusnap demo` (demo.cc) and its worker program (demo_worker.cc) agree on: how the
// worker is started, the known contents of the shared allocations, and the line protocol on
// the control socket.
//
// The demo starts `cusnap run -- cusnap-demo-worker <role> <device> <bytes>...` with the
// control socket on descriptor 3 and the creator-importer socket (tickets, SCM_RIGHTS) on
// descriptor 4. Each request is one line, each answer one line:
//   (after start-up)        -> "ready <bytes checked>" | "fail <why>"
//   check                   -> "ok <bytes checked>"    | "bad <what, where>"
//   read <k> <word>         -> "ok <value, hex>"       (64-bit word <word> of allocation k)
//   write <k> <word> <hex>  -> "ok"
//   exit                    -> "bye" (everything released), then the worker exits 0
// Anything a worker cannot do is answered "fail <why>" and names the allocation.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cusnap::cli::demo {

inline constexpr int kControlFd = 3;  ///< the worker's end of its control socket
inline constexpr int kPeerFd = 4;     ///< creator <-> importer socket (tickets)
inline constexpr size_t kAllocations = 3;
/// Allocation granularity of both the simulated driver and an H200 (cuMemGetAllocationGranularity,
/// DEVICE location, minimum): every size must be a multiple of it.
inline constexpr uint64_t kGranularity = uint64_t{2} << 20;
inline constexpr const char* kWorkerName = "cusnap-demo-worker";

/// The 64-bit word at index `word` of allocation `allocation`: distinct per allocation and
/// per position, so a misplaced, stale or swapped page shows up as a wrong value.
constexpr uint64_t PatternWord(size_t allocation, uint64_t word) {
  return (word + 1) * 0x9E3779B97F4A7C15ull ^ (allocation + 1) * 0xD6E8FEB86659FD93ull;
}

}  // namespace cusnap::cli::demo
