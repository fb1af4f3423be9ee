// Resources checked before the first destructive step of a checkpoint: each participant's
// descriptors and host memory (its shim answers kCheckResources, shim/endpoint/resources.h)
// and the disk space the state file will take. A shortfall refuses the checkpoint while
// nothing has changed, naming the process (or the state directory), the resource, what is
// needed and what is available.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/messages.h"
#include "coordinator/participant.h"
#include "coordinator/topology.h"

namespace cusnap::coord {

/// Environment knob for tests only: when set to a number, the state directory's filesystem
/// is taken to have that many bytes free (statvfs is not asked). Lets a test show the disk
/// space refusal without mounting a full filesystem.
inline constexpr const char* kTestStateDirFreeBytesEnv = "CUSNAP_TEST_STATE_DIR_FREE_BYTES";

/// Spare bytes the state directory must have beyond the state file's estimate.
inline constexpr uint64_t kStateFileMargin = 1u << 20;

/// What the rest of the checkpoint and the restore need of participant `view`: the carrier
/// bytes it will hold (the sizes of the allocations it created) and the descriptors its
/// restore will import (the allocations and multicast objects it holds but did not create).
proto::ResourcesRequest ResourcesNeeded(const ParticipantView& view);

/// Bytes the state file of `views` will take, as written (its JSON, indented), estimated
/// from the records.
uint64_t StateFileEstimate(std::span<const ParticipantView> views);

/// Asks every participant whether it has what ResourcesNeeded says (kCheckResources) and the
/// state directory's filesystem whether it has StateFileEstimate + kStateFileMargin bytes
/// free (statvfs; kTestStateDirFreeBytesEnv in tests). One message per shortfall (empty:
/// enough of everything). `participants` and `views` are in the same order.
std::vector<std::string> CheckResourcesAll(
    std::span<const std::unique_ptr<Participant>> participants,
    std::span<const ParticipantView> views, const std::string& state_dir);

}  // namespace cusnap::coord
