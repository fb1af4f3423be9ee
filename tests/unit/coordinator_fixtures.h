// Record builders shared by the coordinator unit tests: a two-process job (creator 100,
// importer 200) sharing allocations, written the way a shim's INSPECT reports them.
#pragma once

#include <cuda.h>

#include "common/protocol.h"
#include "coordinator/record/topology.h"

namespace cusnap::testing {

inline constexpr uint64_t kStart100 = 5000;  // start times (clock ticks) of pid 100 and 200
inline constexpr uint64_t kStart200 = 6000;
inline constexpr uint64_t kMiB2 = 2ull << 20;

inline proto::ObjectId Id(int pid, uint64_t start, uint64_t local) {
  proto::ObjectId id{};
  id.creator_pid = pid;
  id.creator_start = start;
  id.local_id = local;
  return id;
}

/// An allocation record; `creator` marks the creating process's record.
inline proto::Record Allocation(proto::ObjectId id, uint64_t size, bool creator,
                                uint32_t handles = 1) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kAllocation);
  r.flags = proto::kShared | (creator ? proto::kCreator : 0u) | (handles ? proto::kHandleLive : 0u);
  r.id = id;
  r.object_size = size;
  r.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
  r.location_type = CU_MEM_LOCATION_TYPE_DEVICE;
  r.location_id = 0;
  r.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  r.handle_count = handles;
  return r;
}

/// A mapping record of `id` at `address` with read-write access for device `device`.
inline proto::Record Mapping(proto::ObjectId id, uint64_t address, uint64_t size,
                             uint64_t offset, bool creator, int device = 0) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kMapping);
  r.flags = proto::kShared | (creator ? proto::kCreator : 0u);
  r.id = id;
  r.address = address;
  r.size = size;
  r.offset = offset;
  r.access_count = 1;
  r.access[0].location_type = CU_MEM_LOCATION_TYPE_DEVICE;
  r.access[0].location_id = device;
  r.access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return r;
}

/// A valid job: pid 100 creates allocation 1 (2 MiB) and maps it; pid 200 imports and maps it.
inline std::vector<coord::ParticipantView> ValidJob() {
  const auto a1 = Id(100, kStart100, 1);
  coord::ParticipantView creator{100, kStart100, 0,
                                 {Allocation(a1, kMiB2, true), Mapping(a1, 0x7f0000000000, kMiB2, 0, true)}};
  coord::ParticipantView importer{200, kStart200, 0,
                                  {Allocation(a1, kMiB2, false), Mapping(a1, 0x7e0000000000, kMiB2, 0, false, 1)}};
  return {creator, importer};
}

}  // namespace cusnap::testing
