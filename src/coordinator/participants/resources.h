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
#include "coordinator/participants/participant.h"
#include "coordinator/record/topology.h"

namespace cusnap::coord {

/// Spare bytes the state directory must have beyond the state file's estimate.
inline constexpr uint64_t kStateFileMargin = 1u << 20;

/// What the rest of the checkpoint and the restore need of participant `view`: the carrier
/// bytes it will hold (the sizes of the allocations it created) and the descriptors its
/// restore will import (the allocations and multicast objects it holds but did not create).
proto::ResourcesRequest ResourcesNeeded(const ParticipantView& view);

/// Bytes the state file of `views` will take, as written (its JSON, indented), estimated
/// from the records.
uint64_t StateFileEstimate(std::span<const ParticipantView> views);

/// Bytes a CRIU dump of the tree of `root` will write at least, in bytes: the larger of the
/// tree's anonymous and shared resident memory now (RssAnon + RssShmem of each process's
/// /proc/<pid>/status, what CRIU writes as pages) less `carrier_held`, the host memory the
/// shims' carriers hold now (kept from an earlier cycle: the dump writes it to carrier files
/// and gives it back before CRIU runs, ResourcesReply::carrier_held), and the carrier bytes the
/// participants of `views` will hold (ResourcesNeeded; a carrier provisioned at the save is
/// not resident yet). A lower bound: a shortfall below it is certain.
uint64_t ImagesEstimate(int root, std::span<const ParticipantView> views, uint64_t carrier_held);

/// Asks every participant whether it has what ResourcesNeeded says (kCheckResources) and the
/// state directory's filesystem whether it has StateFileEstimate + kStateFileMargin bytes
/// free (statvfs; CUSNAP_TEST_STATE_DIR_FREE_BYTES in tests, settings.h), plus
/// ImagesEstimate(images_root) when
/// `images_root` > 0 (`cusnap dump`: the state directory is the images directory). One
/// message per shortfall (empty: enough of everything). `participants` and `views` are in
/// the same order.
std::vector<std::string> CheckResourcesAll(
    std::span<const std::unique_ptr<Participant>> participants,
    std::span<const ParticipantView> views, const std::string& state_dir, int images_root = 0);

}  // namespace cusnap::coord
