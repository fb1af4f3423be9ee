// What the unicast and the multicast tables (sharing_table.h, multicast_table.h) both do with
// their mappings: find the one that touches a VA in their by-start-address index, and merge
// cuMemSetAccess descriptors into a mapping's access list per location.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

#include "common/protocol.h"
#include "shim/cuda_abi.h"

namespace cusnap::shim {

/// The first mapping of `index` (keyed by start VA; each value has a `size` in bytes) that
/// ends after `address`: the one containing it, if any, else the next one. O(log n).
template <typename Mapping>
typename std::map<CUdeviceptr, Mapping>::const_iterator FirstTouching(
    const std::map<CUdeviceptr, Mapping>& index, CUdeviceptr address) {
  auto it = index.upper_bound(address);
  if (it != index.begin()) {
    auto previous = std::prev(it);
    if (previous->first + previous->second.size > address) return previous;
  }
  return it;
}

/// Merges one access descriptor into `mapping.access[0 .. mapping.access_count)`, one entry
/// per location (PyTorch grants one device per call): a known location gets the new flags,
/// PROT_NONE removes it, a new location takes a free slot. Returns false, changing nothing,
/// when a new location finds all proto::kMaxAccess slots taken.
template <typename Mapping>
bool MergeAccessDescriptor(Mapping& mapping, const CUmemAccessDesc& d) {
  const auto type = static_cast<int32_t>(d.location.type);
  for (uint32_t i = 0; i < mapping.access_count; ++i) {
    proto::AccessRecord& entry = mapping.access[i];
    if (entry.location_type != type || entry.location_id != d.location.id) continue;
    if (d.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      entry = mapping.access[--mapping.access_count];
      mapping.access[mapping.access_count] = proto::AccessRecord{};
    } else {
      entry.flags = static_cast<uint32_t>(d.flags);
    }
    return true;
  }
  if (d.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) return true;
  if (mapping.access_count >= proto::kMaxAccess) return false;
  mapping.access[mapping.access_count++] =
      proto::AccessRecord{type, d.location.id, static_cast<uint32_t>(d.flags), 0};
  return true;
}

}  // namespace cusnap::shim
