// The multicast table (multicast_table.h).
#include "shim/tables/multicast_table.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace cusnap::shim {
namespace {

proto::Record ObjectRecord(const MulticastObjectInfo& o, proto::RecordKind kind) {
  proto::Record r;
  std::memset(&r, 0, sizeof r);
  r.kind = static_cast<uint32_t>(kind);
  r.id = o.id;
  r.object_size = o.prop.size;
  r.handle_types = static_cast<uint32_t>(o.prop.handle_types);
  r.mc_flags = o.prop.flags;
  r.num_devices = o.prop.num_devices;
  r.flags = (o.creator ? proto::kCreator : 0u) | (o.handles > 0 ? proto::kHandleLive : 0u) |
            (o.shared ? proto::kShared : 0u);
  return r;
}

}  // namespace

CUmulticastObjectProp MulticastProperties::ToDriver() const {
  CUmulticastObjectProp prop{};
  prop.numDevices = num_devices;
  prop.size = size;
  prop.handleTypes = handle_types;
  prop.flags = flags;
  return prop;
}

MulticastProperties MulticastProperties::FromDriver(const CUmulticastObjectProp& prop) {
  return MulticastProperties{prop.numDevices, prop.size, prop.handleTypes, prop.flags};
}

bool MulticastTable::IdLess::operator()(const proto::ObjectId& a, const proto::ObjectId& b) const {
  return std::tie(a.creator_pid, a.creator_start, a.local_id) <
         std::tie(b.creator_pid, b.creator_start, b.local_id);
}

uint64_t MulticastTable::NewHandleLocked(MulticastKey key) {
  if (next_handle_ >= kMulticastHandleBit) return 0;
  const uint64_t handle = kLogicalTag | kMulticastHandleBit | next_handle_++;
  handles_.Add(handle, key);
  ++objects_.at(key).info.handles;
  return handle;
}

std::optional<MulticastDropped> MulticastTable::DropIfUnusedLocked(MulticastKey key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  const MulticastObjectInfo& o = it->second.info;
  if (o.handles != 0 || o.mappings != 0 || it->second.pins != 0) return std::nullopt;
  MulticastDropped dropped{o.id, o.creator, o.has_real, o.real};
  by_id_.erase(o.id);
  objects_.erase(it);
  return dropped;
}

MulticastKey MulticastTable::AddLocked(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                                       const MulticastProperties& prop, CUcontext context,
                                       bool creator) {
  const MulticastKey key = next_key_++;
  Object object;
  object.info.key = key;
  object.info.id = id;
  object.info.prop = prop;
  object.info.context = context;
  object.info.has_real = true;
  object.info.real = real;
  object.info.creator = creator;
  object.info.shared = !creator;
  objects_.emplace(key, std::move(object));
  return key;
}

uint64_t MulticastTable::AddCreated(CUmemGenericAllocationHandle real,
                                    const MulticastProperties& prop, CUcontext context,
                                    const ProcessIdentity& self) {
  std::lock_guard lock(mutex_);
  proto::ObjectId id{};
  id.creator_pid = self.pid;
  id.creator_start = self.start_time;
  id.local_id = next_local_id_++;
  const MulticastKey key = AddLocked(id, real, prop, context, /*creator=*/true);
  const uint64_t handle = NewHandleLocked(key);
  if (handle == 0) {
    objects_.erase(key);
    return 0;
  }
  by_id_.emplace(id, key);
  return handle;
}

std::optional<uint64_t> MulticastTable::AliasById(const proto::ObjectId& id) {
  std::lock_guard lock(mutex_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  const uint64_t handle = NewHandleLocked(it->second);
  if (handle == 0) return std::nullopt;
  return handle;
}

uint64_t MulticastTable::AddImported(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                                     const MulticastProperties& prop, CUcontext context,
                                     bool* duplicate_real) {
  std::lock_guard lock(mutex_);
  *duplicate_real = false;
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    *duplicate_real = true;
    return NewHandleLocked(it->second);
  }
  const MulticastKey key = AddLocked(id, real, prop, context, /*creator=*/false);
  const uint64_t handle = NewHandleLocked(key);
  if (handle == 0) {
    objects_.erase(key);
    return 0;
  }
  by_id_.emplace(id, key);
  return handle;
}

bool MulticastTable::Knows(uint64_t handle) const {
  std::lock_guard lock(mutex_);
  return handles_.Knows(handle);
}

std::optional<MulticastPinned> MulticastTable::Pin(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const std::optional<MulticastKey> key = handles_.Find(handle);
  if (!key) return std::nullopt;
  Object& o = objects_.at(*key);
  ++o.pins;
  return MulticastPinned{o.info.key, o.info.id, o.info.prop, o.info.creator, o.info.has_real,
                         o.info.real};
}

std::optional<MulticastDropped> MulticastTable::Unpin(MulticastKey key) {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(key);
  if (it == objects_.end() || it->second.pins == 0) return std::nullopt;
  --it->second.pins;
  return DropIfUnusedLocked(key);
}

bool MulticastTable::ReleaseHandle(uint64_t handle, std::optional<MulticastDropped>* dropped) {
  std::lock_guard lock(mutex_);
  dropped->reset();
  const std::optional<MulticastKey> key = handles_.Release(handle);
  if (!key) return false;
  --objects_.at(*key).info.handles;
  *dropped = DropIfUnusedLocked(*key);
  return true;
}

std::optional<uint64_t> MulticastTable::RetainAt(CUdeviceptr address) {
  std::lock_guard lock(mutex_);
  const MulticastMapping* mapping = mappings_.Containing(address);
  if (mapping == nullptr) return std::nullopt;
  // The handle value the range was mapped with (CUDA Driver API, cuMemRetainAllocationHandle),
  // brought back to life if the application had released it.
  handles_.Retain(mapping->logical, mapping->key);
  ++objects_.at(mapping->key).info.handles;
  return mapping->logical;
}

void MulticastTable::MarkShared(MulticastKey key) {
  std::lock_guard lock(mutex_);
  if (auto it = objects_.find(key); it != objects_.end()) it->second.info.shared = true;
}

void MulticastTable::AddDevice(MulticastKey key, int device) {
  std::lock_guard lock(mutex_);
  if (auto it = objects_.find(key); it != objects_.end()) it->second.info.devices.push_back(device);
}

void MulticastTable::AddBinding(MulticastKey key, const MulticastBinding& binding) {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  it->second.info.bindings.push_back(binding);
  it->second.info.extent = std::max(it->second.info.extent, binding.mc_offset + binding.size);
}

bool MulticastTable::RemoveBinding(MulticastKey key, int device, uint64_t mc_offset, uint64_t size) {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return false;
  auto& bindings = it->second.info.bindings;
  auto b = std::find_if(bindings.begin(), bindings.end(), [&](const MulticastBinding& x) {
    return x.device == device && x.mc_offset == mc_offset && x.size == size;
  });
  if (b == bindings.end()) return false;
  bindings.erase(b);
  return true;
}

bool MulticastTable::AddMapping(CUdeviceptr address, uint64_t size, uint64_t offset,
                                uint64_t flags, MulticastKey key, uint64_t logical) {
  std::lock_guard lock(mutex_);
  auto object = objects_.find(key);
  if (object == objects_.end()) return false;
  MulticastMapping m;
  m.address = address;
  m.size = size;
  m.offset = offset;
  m.flags = flags;
  m.key = key;
  m.logical = logical;
  if (!mappings_.Add(m)) return false;
  mapping_count_.store(mappings_.size(), std::memory_order_release);
  ++object->second.info.mappings;
  object->second.info.extent = std::max(object->second.info.extent, offset + size);
  return true;
}

RangeMatch MulticastTable::Classify(CUdeviceptr address, size_t size) const {
  if (mapping_count_.load(std::memory_order_acquire) == 0) return RangeMatch::kNone;
  std::lock_guard lock(mutex_);
  return mappings_.Classify(address, size);
}

std::vector<MulticastDropped> MulticastTable::RemoveMappings(CUdeviceptr address, size_t size) {
  std::lock_guard lock(mutex_);
  std::vector<MulticastDropped> dropped;
  mappings_.RemoveInside(address, size, [&](const MulticastMapping& removed) {
    --objects_.at(removed.key).info.mappings;
    if (auto d = DropIfUnusedLocked(removed.key)) dropped.push_back(*d);
  });
  mapping_count_.store(mappings_.size(), std::memory_order_release);
  return dropped;
}

bool MulticastTable::AccessFits(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                                size_t count) const {
  std::lock_guard lock(mutex_);
  return mappings_.AccessFits(address, size, desc, count);
}

void MulticastTable::MergeAccess(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                                 size_t count) {
  std::lock_guard lock(mutex_);
  mappings_.MergeAccess(address, size, desc, count);
}

void MulticastTable::MarkAccessUnknown(CUdeviceptr address, size_t size) {
  std::lock_guard lock(mutex_);
  mappings_.MarkAccessUnknown(address, size);
}

bool MulticastTable::SetRealHandle(MulticastKey key,
                                   std::optional<CUmemGenericAllocationHandle> real) {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return false;
  it->second.info.has_real = real.has_value();
  it->second.info.real = real.value_or(0);
  return true;
}

std::vector<proto::Record> MulticastTable::Inspect() const {
  std::lock_guard lock(mutex_);
  std::vector<proto::Record> records;
  for (const auto& [id, key] : by_id_) {
    const MulticastObjectInfo& o = objects_.at(key).info;
    proto::Record object = ObjectRecord(o, proto::RecordKind::kMulticast);
    object.handle_count = o.handles;
    object.extent = o.extent;
    records.push_back(object);
    for (int device : o.devices) {
      proto::Record r = ObjectRecord(o, proto::RecordKind::kMulticastDevice);
      r.device = device;
      records.push_back(r);
    }
    for (const MulticastBinding& b : o.bindings) {
      proto::Record r = ObjectRecord(o, proto::RecordKind::kMulticastBinding);
      r.device = b.device;
      r.offset = b.mc_offset;
      r.size = b.size;
      r.op_flags = b.flags;
      r.bind_kind = static_cast<uint32_t>(b.kind);
      r.bind_api = b.api;
      r.address = b.kind == BindKind::kAddr ? b.address : 0;
      if (b.tracked_member) {
        r.member = b.member;
        r.member_offset = b.member_offset;
      }
      records.push_back(r);
    }
  }
  for (const auto& [address, m] : mappings_) {
    proto::Record r = ObjectRecord(objects_.at(m.key).info, proto::RecordKind::kMulticastMapping);
    r.address = m.address;
    r.size = m.size;
    r.offset = m.offset;
    r.op_flags = m.flags;
    r.access_count = m.access_count;
    for (uint32_t i = 0; i < m.access_count; ++i) r.access[i] = m.access[i];
    records.push_back(r);
  }
  return records;
}

uint64_t MulticastTable::RecordCount() const {
  std::lock_guard lock(mutex_);
  uint64_t count = mappings_.size();
  for (const auto& [key, o] : objects_) count += 1 + o.info.devices.size() + o.info.bindings.size();
  return count;
}

std::vector<MulticastObjectInfo> MulticastTable::Objects() const {
  std::lock_guard lock(mutex_);
  std::vector<MulticastObjectInfo> out;
  out.reserve(objects_.size());
  for (const auto& [id, key] : by_id_) out.push_back(objects_.at(key).info);
  return out;
}

std::vector<MulticastMapping> MulticastTable::Mappings() const {
  std::lock_guard lock(mutex_);
  std::vector<MulticastMapping> out;
  out.reserve(mappings_.size());
  for (const auto& [address, m] : mappings_) out.push_back(m);
  return out;
}

}  // namespace cusnap::shim
