// What the unicast and the multicast tables (sharing_table.h, multicast_table.h) both do with
// their mappings: a by-start-address index of non-overlapping VA ranges that answers how a
// range relates to it, removes the mappings inside a range, and merges cuMemSetAccess
// descriptors into each mapping's access list per location. No locking: each table calls
// these under its own mutex (handle_table.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>

#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// How a VA range relates to the tracked mappings.
enum class RangeMatch {
  kNone,     ///< touches no tracked mapping: not ours, pass it through
  kCovers,   ///< every tracked mapping it touches lies wholly inside it
  kPartial,  ///< cuts through a tracked mapping: refused (CUDA_ERROR_INVALID_VALUE)
};

/// Merges one access descriptor into `mapping.access[0 .. mapping.access_count)`, one entry
/// per location (PyTorch grants one device per call): a known location gets the new flags,
/// PROT_NONE removes it, a new location takes a free slot. Returns false, changing nothing,
/// when a new location finds all proto::kMaxAccess slots taken.
template <typename Mapping>
bool MergeAccessDescriptor(Mapping& mapping, const CUmemAccessDesc& d) {
  const auto type = static_cast<int32_t>(d.location.type);
  // The driver keeps one host access per mapping: a HOST and a HOST_NUMA descriptor set the
  // same value, the last one wins (DRIVER-FACTS F12). So one entry stands for both, and it
  // names the last descriptor's kind: replaying two entries in another order would change
  // what cuMemGetAccess(HOST) answers after a restore.
  const auto is_host = [](int32_t t) {
    return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  };
  for (uint32_t i = 0; i < mapping.access_count; ++i) {
    proto::AccessRecord& entry = mapping.access[i];
    const bool same = is_host(type) ? is_host(entry.location_type)
                                    : entry.location_type == type && entry.location_id == d.location.id;
    if (!same) continue;
    if (d.flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      entry = mapping.access[--mapping.access_count];
      mapping.access[mapping.access_count] = proto::AccessRecord{};
    } else {
      entry.location_type = type;
      entry.location_id = d.location.id;
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

/// Non-overlapping mappings keyed by start VA. `Mapping` has `address` and `size` (bytes),
/// `access_count` and `access[proto::kMaxAccess]`.
template <typename Mapping>
class MappingIndex {
 public:
  using const_iterator = typename std::map<CUdeviceptr, Mapping>::const_iterator;

  /// The mapping containing `address`, or null. O(log n).
  const Mapping* Containing(CUdeviceptr address) const {
    auto it = FirstTouching(address);
    if (it == by_address_.end() || it->first > address) return nullptr;
    return &it->second;
  }

  /// Records `mapping` at mapping.address; false (nothing recorded) when its size is 0 or it
  /// overlaps a mapping already here.
  bool Add(const Mapping& mapping) {
    if (mapping.size == 0) return false;
    auto it = FirstTouching(mapping.address);
    if (it != by_address_.end() && it->first < mapping.address + mapping.size) return false;
    by_address_.emplace(mapping.address, mapping);
    return true;
  }

  /// How [address, address+size) relates to the mappings.
  RangeMatch Classify(CUdeviceptr address, size_t size) const {
    const CUdeviceptr end = address + size;
    RangeMatch match = RangeMatch::kNone;
    for (auto it = FirstTouching(address); it != by_address_.end() && it->first < end; ++it) {
      if (it->first < address || it->first + it->second.size > end) return RangeMatch::kPartial;
      match = RangeMatch::kCovers;
    }
    return match;
  }

  /// Removes every mapping lying wholly inside [address, address+size), in address order,
  /// calling `on_removed(mapping)` after each is gone (the table drops its references).
  template <typename OnRemoved>
  void RemoveInside(CUdeviceptr address, size_t size, OnRemoved on_removed) {
    const CUdeviceptr end = address + size;
    auto it = by_address_.lower_bound(address);
    while (it != by_address_.end() && it->first + it->second.size <= end) {
      const Mapping removed = it->second;
      it = by_address_.erase(it);
      on_removed(removed);
    }
  }

  /// True when merging `count` descriptors into every mapping starting inside the range
  /// keeps each within proto::kMaxAccess distinct locations.
  bool AccessFits(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                  size_t count) const {
    const CUdeviceptr end = address + size;
    for (auto it = by_address_.lower_bound(address); it != by_address_.end() && it->first < end;
         ++it) {
      Mapping trial = it->second;
      for (size_t i = 0; i < count; ++i) {
        if (!MergeAccessDescriptor(trial, desc[i])) return false;
      }
    }
    return true;
  }

  /// After a successful cuMemSetAccess: merges the descriptors into every mapping lying
  /// wholly inside the range.
  void MergeAccess(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc, size_t count) {
    const CUdeviceptr end = address + size;
    for (auto it = by_address_.lower_bound(address);
         it != by_address_.end() && it->first + it->second.size <= end; ++it) {
      for (size_t i = 0; i < count; ++i) MergeAccessDescriptor(it->second, desc[i]);
    }
  }

  size_t size() const { return by_address_.size(); }
  const_iterator begin() const { return by_address_.begin(); }
  const_iterator end() const { return by_address_.end(); }

 private:
  // The first mapping of `map` (this index, const or not) that ends after `address`: the one
  // containing it, if any, else the next one. O(log n).
  template <typename Map>
  static auto FirstTouching(Map& map, CUdeviceptr address) {
    auto it = map.upper_bound(address);
    if (it != map.begin()) {
      auto previous = std::prev(it);
      if (previous->first + previous->second.size > address) return previous;
    }
    return it;
  }
  const_iterator FirstTouching(CUdeviceptr address) const {
    return FirstTouching(by_address_, address);
  }

  std::map<CUdeviceptr, Mapping> by_address_;
};

}  // namespace cusnap::shim
