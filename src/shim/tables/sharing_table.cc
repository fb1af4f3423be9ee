#include "shim/tables/sharing_table.h"

#include <cstring>
#include <map>
#include <tuple>

namespace cusnap::shim {

uint64_t SharingTable::NewHandleLocked(AllocationKey key) {
  const uint64_t handle = counter_.Next();
  if (handle == 0) return 0;
  handles_.Add(handle, key);
  ++allocations_.at(key).handles;
  return handle;
}

std::optional<Dropped> SharingTable::DropIfUnusedLocked(AllocationKey key) {
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return std::nullopt;
  const Allocation& a = it->second;
  if (a.handles != 0 || a.mappings != 0 || a.pins != 0) return std::nullopt;
  Dropped dropped{a.id, a.creator, a.has_real, a.real};
  by_id_.erase(a.id);
  allocations_.erase(it);
  return dropped;
}

uint64_t SharingTable::AddCreated(CUmemGenericAllocationHandle real, size_t size,
                                  const CUmemAllocationProp& prop, CUcontext context,
                                  const ProcessIdentity& self) {
  std::lock_guard lock(mutex_);
  const AllocationKey key = next_key_++;
  Allocation a;
  a.id.creator_pid = self.pid;
  a.id.creator_start = self.start_time;
  a.id.local_id = next_local_id_++;
  a.size = size;
  a.prop = prop;
  a.context = context;
  a.has_real = true;
  a.real = real;
  a.creator = true;
  allocations_.emplace(key, a);
  ++created_total_;
  if (prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
      prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
      prop.location.type == CU_MEM_LOCATION_TYPE_HOST) {
    ++created_host_numa_;
  }
  const uint64_t handle = NewHandleLocked(key);
  if (handle == 0) {
    allocations_.erase(key);
    return 0;
  }
  by_id_.emplace(a.id, key);
  return handle;
}

std::optional<uint64_t> SharingTable::AliasById(const proto::ObjectId& id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  const uint64_t handle = NewHandleLocked(it->second);
  if (handle == 0) return std::nullopt;
  allocations_.at(it->second).shared = true;
  return handle;
}

uint64_t SharingTable::AddImported(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                                   size_t size, const CUmemAllocationProp& prop,
                                   CUcontext context, bool* duplicate_real) {
  std::lock_guard lock(mutex_);
  *duplicate_real = false;
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    *duplicate_real = true;
    return NewHandleLocked(it->second);
  }
  const AllocationKey key = next_key_++;
  Allocation a;
  a.id = id;
  a.size = size;
  a.prop = prop;
  a.context = context;
  a.has_real = true;
  a.real = real;
  a.creator = false;
  a.shared = true;
  allocations_.emplace(key, a);
  const uint64_t handle = NewHandleLocked(key);
  if (handle == 0) {
    allocations_.erase(key);
    return 0;
  }
  by_id_.emplace(id, key);
  return handle;
}

std::optional<uint64_t> SharingTable::RetainAt(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  const MappingInfo* mapping = mappings_.Containing(address);
  if (mapping == nullptr) return std::nullopt;
  handles_.Retain(mapping->logical, mapping->key);
  ++allocations_.at(mapping->key).handles;
  return mapping->logical;
}

std::optional<std::pair<CUdeviceptr, size_t>> SharingTable::MappingRangeAt(
    CUdeviceptr address) const {
  std::lock_guard lock(mutex_);
  const MappingInfo* mapping = mappings_.Containing(address);
  if (mapping == nullptr) return std::nullopt;
  return std::make_pair(mapping->address, mapping->size);
}

std::optional<CUmemAllocationProp> SharingTable::ImportedProperties(uint64_t handle) const {
  std::lock_guard lock(mutex_);
  const std::optional<AllocationKey> key = handles_.Find(handle);
  if (!key) return std::nullopt;
  const Allocation& a = allocations_.at(*key);
  if (a.creator) return std::nullopt;
  return a.prop;
}

bool SharingTable::Knows(uint64_t handle) const {
  std::lock_guard lock(mutex_);
  return handles_.Knows(handle);
}

std::optional<Pinned> SharingTable::Pin(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const std::optional<AllocationKey> key = handles_.Find(handle);
  if (!key) return std::nullopt;
  Allocation& a = allocations_.at(*key);
  ++a.pins;
  return Pinned{*key, a.id, a.size, a.creator, a.has_real, a.real};
}

std::optional<Dropped> SharingTable::Unpin(AllocationKey key) {
  std::lock_guard lock(mutex_);
  auto it = allocations_.find(key);
  if (it == allocations_.end() || it->second.pins == 0) return std::nullopt;
  --it->second.pins;
  return DropIfUnusedLocked(key);
}

bool SharingTable::ReleaseHandle(uint64_t handle, std::optional<Dropped>* dropped) {
  std::lock_guard lock(mutex_);
  dropped->reset();
  const std::optional<AllocationKey> key = handles_.Release(handle);
  if (!key) return false;
  --allocations_.at(*key).handles;
  *dropped = DropIfUnusedLocked(*key);
  return true;
}

void SharingTable::MarkShared(AllocationKey key, CUcontext context) {
  std::lock_guard lock(mutex_);
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return;
  it->second.shared = true;
  if (context != nullptr) it->second.context = context;
}

bool SharingTable::AddMapping(CUdeviceptr address, size_t size, size_t offset,
                              AllocationKey key, uint64_t logical) {
  std::lock_guard lock(mutex_);
  auto allocation = allocations_.find(key);
  if (allocation == allocations_.end()) return false;
  MappingInfo mapping;
  mapping.address = address;
  mapping.size = size;
  mapping.offset = offset;
  mapping.key = key;
  mapping.logical = logical;
  if (!mappings_.Add(mapping)) return false;
  ++allocation->second.mappings;
  return true;
}

RangeMatch SharingTable::Classify(CUdeviceptr address, size_t size) const {
  std::lock_guard lock(mutex_);
  return mappings_.Classify(address, size);
}

std::vector<Dropped> SharingTable::RemoveMappings(CUdeviceptr address, size_t size) {
  std::lock_guard lock(mutex_);
  std::vector<Dropped> dropped;
  mappings_.RemoveInside(address, size, [&](const MappingInfo& removed) {
    --allocations_.at(removed.key).mappings;
    if (auto d = DropIfUnusedLocked(removed.key)) dropped.push_back(*d);
  });
  return dropped;
}

bool SharingTable::AccessFits(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                              size_t count) const {
  std::lock_guard lock(mutex_);
  return mappings_.AccessFits(address, size, desc, count);
}

void SharingTable::MergeAccess(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                               size_t count) {
  std::lock_guard lock(mutex_);
  mappings_.MergeAccess(address, size, desc, count);
}

void SharingTable::MarkAccessUnknown(CUdeviceptr address, size_t size) {
  std::lock_guard lock(mutex_);
  mappings_.MarkAccessUnknown(address, size);
}

void SharingTable::CountUntrackedImport(CUmemGenericAllocationHandle real,
                                        const CUmemAllocationProp* prop,
                                        CUmemAllocationHandleType type) {
  std::lock_guard lock(mutex_);
  untracked_.AddImport(real, prop, type);
  untracked_live_.store(untracked_.size(), std::memory_order_release);
}

void SharingTable::NoteUntrackedRetain(CUmemGenericAllocationHandle real) {
  if (untracked_live_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mutex_);
  untracked_.Retain(real);
}

void SharingTable::ForgetUntrackedImport(CUmemGenericAllocationHandle real) {
  if (untracked_live_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mutex_);
  untracked_.Release(real);
  untracked_live_.store(untracked_.size(), std::memory_order_release);
}

void SharingTable::NoteUntrackedMapping(CUdeviceptr address, size_t size, size_t offset,
                                        CUmemGenericAllocationHandle real) {
  if (untracked_live_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mutex_);
  untracked_.AddMapping(address, size, offset, real);
  untracked_live_.store(untracked_.size(), std::memory_order_release);
}

void SharingTable::ForgetUntrackedMappings(CUdeviceptr address, size_t size) {
  if (untracked_live_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mutex_);
  untracked_.RemoveMappings(address, size);
  untracked_live_.store(untracked_.size(), std::memory_order_release);
}

std::vector<proto::Record> SharingTable::UntrackedRecords() const {
  std::lock_guard lock(mutex_);
  return untracked_.Records(proto::kMaxUntrackedReported);
}

TableCounts SharingTable::Counts() const {
  std::lock_guard lock(mutex_);
  TableCounts counts;
  counts.allocations = allocations_.size();
  counts.mappings = mappings_.size();
  counts.records = counts.allocations + counts.mappings;
  counts.untracked_imports = untracked_.size();
  counts.created_total = created_total_;
  counts.created_host_numa = created_host_numa_;
  for (const auto& [key, a] : allocations_) counts.tracked_bytes += a.size;
  return counts;
}

void SharingTable::FillAllocationRecord(const Allocation& a, proto::Record* record) const {
  record->id = a.id;
  record->object_size = a.size;
  record->alloc_type = static_cast<int32_t>(a.prop.type);
  record->location_type = static_cast<int32_t>(a.prop.location.type);
  record->location_id = a.prop.location.id;
  record->handle_types = static_cast<uint32_t>(a.prop.requestedHandleTypes);
  record->handle_count = a.handles;
  record->flags = (a.creator ? proto::kCreator : 0u) | (a.handles > 0 ? proto::kHandleLive : 0u) |
                  (a.shared ? proto::kShared : 0u);
}

std::vector<proto::Record> SharingTable::Inspect() const {
  std::lock_guard lock(mutex_);
  std::vector<proto::Record> records;
  records.reserve(allocations_.size() + mappings_.size());
  // Allocations in local-id order so that two INSPECTs of the same table compare equal.
  std::map<std::tuple<int32_t, uint64_t, uint64_t>, const Allocation*> ordered;
  for (const auto& [key, a] : allocations_) {
    ordered.emplace(std::tuple(a.id.creator_pid, a.id.creator_start, a.id.local_id), &a);
  }
  for (const auto& [order, a] : ordered) {
    proto::Record record;
    std::memset(&record, 0, sizeof record);
    record.kind = static_cast<uint32_t>(proto::RecordKind::kAllocation);
    FillAllocationRecord(*a, &record);
    records.push_back(record);
  }
  for (const auto& [address, m] : mappings_) {
    proto::Record record;
    std::memset(&record, 0, sizeof record);
    record.kind = static_cast<uint32_t>(proto::RecordKind::kMapping);
    FillAllocationRecord(allocations_.at(m.key), &record);
    record.address = m.address;
    record.size = m.size;
    record.offset = m.offset;
    record.access_count = m.access_count;
    for (uint32_t i = 0; i < m.access_count; ++i) record.access[i] = m.access[i];
    records.push_back(record);
  }
  return records;
}

std::vector<AllocationInfo> SharingTable::Allocations() const {
  std::lock_guard lock(mutex_);
  std::vector<AllocationInfo> out;
  out.reserve(allocations_.size());
  for (const auto& [key, a] : allocations_) {
    out.push_back(AllocationInfo{key, a.id, a.size, a.prop, a.context, a.has_real, a.real,
                                 a.creator, a.shared, a.handles, a.mappings});
  }
  return out;
}

std::vector<MappingInfo> SharingTable::Mappings() const {
  std::lock_guard lock(mutex_);
  std::vector<MappingInfo> out;
  out.reserve(mappings_.size());
  for (const auto& [address, m] : mappings_) out.push_back(m);
  return out;
}

bool SharingTable::SetRealHandle(AllocationKey key,
                                 std::optional<CUmemGenericAllocationHandle> real) {
  std::lock_guard lock(mutex_);
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return false;
  it->second.has_real = real.has_value();
  it->second.real = real.value_or(0);
  return true;
}

}  // namespace cusnap::shim
