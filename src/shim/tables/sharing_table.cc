// The sharing table (sharing_table.h): what is particular to unicast allocations on top of
// HandleTable (handle_table.h).
#include "shim/tables/sharing_table.h"

#include <cstring>

#include "shim/tables/capabilities.h"

namespace cusnap::shim {
namespace {

void FillAllocationRecord(const AllocationInfo& a, proto::Record* record) {
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

}  // namespace

AllocationInfo SharingTable::NewAllocation(const proto::ObjectId& id,
                                           CUmemGenericAllocationHandle real, size_t size,
                                           const CUmemAllocationProp& prop, CUcontext context,
                                           bool creator) {
  AllocationInfo a = NewInfo(id, real, context, creator);
  a.size = size;
  a.prop = prop;
  return a;
}

uint64_t SharingTable::AddCreated(CUmemGenericAllocationHandle real, size_t size,
                                  const CUmemAllocationProp& prop, CUcontext context,
                                  const ProcessIdentity& self) {
  std::lock_guard lock(mutex_);
  ++created_total_;
  if (prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
      prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
      prop.location.type == CU_MEM_LOCATION_TYPE_HOST) {
    ++created_host_numa_;
  }
  AllocationInfo a = NewAllocation(NewIdLocked(self), real, size, prop, context, /*creator=*/true);
  a.capability = CapabilityOf(TicketKind::kUnicast, a.id.local_id);
  return AddLocked(std::move(a));
}

std::optional<uint64_t> SharingTable::AliasById(const proto::ObjectId& id) {
  std::lock_guard lock(mutex_);
  auto alias = AliasLocked(id);
  if (!alias) return std::nullopt;
  alias->second->shared = true;
  return alias->first;
}

uint64_t SharingTable::AddImported(const proto::ObjectId& id, const proto::Capability& capability,
                                   CUmemGenericAllocationHandle real, size_t size,
                                   const CUmemAllocationProp& prop, CUcontext context,
                                   bool* duplicate_real) {
  std::lock_guard lock(mutex_);
  AllocationInfo a = NewAllocation(id, real, size, prop, context, /*creator=*/false);
  a.capability = capability;
  return AddImportedLocked(std::move(a), duplicate_real);
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
  const AllocationInfo* a = FindLocked(handle);
  if (a == nullptr || a->creator) return std::nullopt;
  return a->prop;
}

std::optional<Pinned> SharingTable::Pin(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const AllocationInfo* a = PinLocked(handle);
  if (a == nullptr) return std::nullopt;
  return Pinned{a->key, a->id, a->capability, a->size, a->creator, a->has_real, a->real};
}

void SharingTable::MarkShared(AllocationKey key, CUcontext context) {
  std::lock_guard lock(mutex_);
  AllocationInfo* a = InfoLocked(key);
  if (a == nullptr) return;
  a->shared = true;
  if (context != nullptr) a->context = context;
}

bool SharingTable::AddMapping(CUdeviceptr address, size_t size, size_t offset,
                              AllocationKey key, uint64_t logical) {
  std::lock_guard lock(mutex_);
  MappingInfo mapping;
  mapping.address = address;
  mapping.size = size;
  mapping.offset = offset;
  mapping.key = key;
  mapping.logical = logical;
  return AddMappingLocked(mapping);
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
  counts.allocations = ObjectCountLocked();
  counts.mappings = mappings_.size();
  counts.records = counts.allocations + counts.mappings;
  counts.untracked_imports = untracked_.size();
  counts.created_total = created_total_;
  counts.created_host_numa = created_host_numa_;
  ForEachLocked([&](const AllocationInfo& a) { counts.tracked_bytes += a.size; });
  return counts;
}

std::vector<proto::Record> SharingTable::Inspect() const {
  std::lock_guard lock(mutex_);
  std::vector<proto::Record> records;
  records.reserve(ObjectCountLocked() + mappings_.size());
  // Allocations in object id order so that two INSPECTs of the same table compare equal.
  ForEachLocked([&](const AllocationInfo& a) {
    proto::Record record;
    std::memset(&record, 0, sizeof record);
    record.kind = static_cast<uint32_t>(proto::RecordKind::kAllocation);
    FillAllocationRecord(a, &record);
    records.push_back(record);
  });
  for (const auto& [address, m] : mappings_) {
    proto::Record record;
    std::memset(&record, 0, sizeof record);
    record.kind = static_cast<uint32_t>(proto::RecordKind::kMapping);
    FillAllocationRecord(*InfoLocked(m.key), &record);
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
  out.reserve(ObjectCountLocked());
  ForEachLocked([&](const AllocationInfo& a) { out.push_back(a); });
  return out;
}

std::vector<proto::ObjectId> SharingTable::Held(const std::vector<proto::ObjectId>& ids) const {
  std::lock_guard lock(mutex_);
  std::vector<proto::ObjectId> held;
  for (const proto::ObjectId& id : ids) {
    const AllocationInfo* a = FindByIdLocked(id);
    if (a != nullptr && a->has_real) held.push_back(id);
  }
  return held;
}

}  // namespace cusnap::shim
