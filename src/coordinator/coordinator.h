// The coordinator's face, what the CLI includes: the commands (sequences/commands.h: checkpoint,
// restore, recover; sequences/dump.h: dump and the images restore), where participants come
// from (discovery.cc) and what `cusnap status` shows of them (status.cc). The rooms below it
// are listed, in order, in src/coordinator/CMakeLists.txt and DESIGN.md ("Layout").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "coordinator/participants/participant.h"
#include "coordinator/sequences/commands.h"

namespace cusnap::coord {

/// Where participants come from.
struct DiscoveryOptions {
  std::string control_dir;  ///< endpoints live here (ControlDir())
  int pid = 0;              ///< the process tree under this pid ...
  bool all = false;         ///< ... or every live endpoint in control_dir
};

/// The Discoverer over real endpoints and /proc.
Discoverer EndpointDiscoverer(DiscoveryOptions options);

/// One participant as `cusnap status` shows it.
struct ParticipantStatus {
  Identity identity;
  size_t allocations = 0;        ///< allocation records (created or imported)
  size_t created = 0;            ///< of which this process is the creator
  size_t mappings = 0;
  std::string inspect_error;     ///< why INSPECT failed, if it did
  /// Non-empty when the process is held stopped (hold.h): its endpoint was not asked (it
  /// cannot answer); the identity holds pid, start time and RELEASED (a process is stopped
  /// only after its native checkpoint, so after release), the counts are 0. Says so.
  std::string held;
  /// Non-empty when the endpoint did not answer (stopped by someone else, or IDENTIFY failed):
  /// the identity holds only pid and start time; the same text is one of CollectStatus's
  /// `errors`. Such a participant is still listed, so that status names every process.
  std::string unreachable;
};

/// Identifies and inspects every participant (read-only, concurrently); one entry per
/// participant, in order. Errors of single participants land in `errors`.
std::vector<ParticipantStatus> CollectStatus(std::vector<std::unique_ptr<Participant>>& participants,
                                             std::vector<std::string>& errors);

}  // namespace cusnap::coord
