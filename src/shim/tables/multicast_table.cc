// The multicast table (multicast_table.h).
#include "shim/tables/multicast_table.h"

#include "shim/tables/capabilities.h"

#include <algorithm>
#include <cstring>

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

MulticastObjectInfo MulticastTable::NewObject(const proto::ObjectId& id,
                                              CUmemGenericAllocationHandle real,
                                              const MulticastProperties& prop, CUcontext context,
                                              bool creator) {
  MulticastObjectInfo o = NewInfo(id, real, context, creator);
  o.prop = prop;
  return o;
}

uint64_t MulticastTable::AddCreated(CUmemGenericAllocationHandle real,
                                    const MulticastProperties& prop, CUcontext context,
                                    const ProcessIdentity& self) {
  std::lock_guard lock(mutex_);
  MulticastObjectInfo o = NewObject(NewIdLocked(self), real, prop, context, /*creator=*/true);
  o.capability = CapabilityOf(TicketKind::kMulticast, o.id.local_id);
  return AddLocked(std::move(o));
}

std::optional<uint64_t> MulticastTable::AliasById(const proto::ObjectId& id) {
  std::lock_guard lock(mutex_);
  auto alias = AliasLocked(id);
  if (!alias) return std::nullopt;
  return alias->first;
}

uint64_t MulticastTable::AddImported(const proto::ObjectId& id, const proto::Capability& capability,
                                     CUmemGenericAllocationHandle real,
                                     const MulticastProperties& prop, CUcontext context,
                                     bool* duplicate_real) {
  std::lock_guard lock(mutex_);
  MulticastObjectInfo o = NewObject(id, real, prop, context, /*creator=*/false);
  o.capability = capability;
  return AddImportedLocked(std::move(o), duplicate_real);
}

std::optional<MulticastPinned> MulticastTable::Pin(uint64_t handle) {
  std::lock_guard lock(mutex_);
  const MulticastObjectInfo* o = PinLocked(handle);
  if (o == nullptr) return std::nullopt;
  return MulticastPinned{o->key, o->id, o->capability, o->prop, o->creator, o->has_real, o->real};
}

void MulticastTable::MarkShared(MulticastKey key) {
  std::lock_guard lock(mutex_);
  if (MulticastObjectInfo* o = InfoLocked(key)) o->shared = true;
}

void MulticastTable::AddDevice(MulticastKey key, int device) {
  std::lock_guard lock(mutex_);
  if (MulticastObjectInfo* o = InfoLocked(key)) o->devices.push_back(device);
}

void MulticastTable::AddBinding(MulticastKey key, const MulticastBinding& binding) {
  std::lock_guard lock(mutex_);
  MulticastObjectInfo* o = InfoLocked(key);
  if (o == nullptr) return;
  o->bindings.push_back(binding);
  o->extent = std::max(o->extent, binding.mc_offset + binding.size);
}

bool MulticastTable::RemoveBinding(MulticastKey key, int device, uint64_t mc_offset, uint64_t size) {
  std::lock_guard lock(mutex_);
  MulticastObjectInfo* o = InfoLocked(key);
  if (o == nullptr) return false;
  auto& bindings = o->bindings;
  auto b = std::find_if(bindings.begin(), bindings.end(), [&](const MulticastBinding& x) {
    return x.device == device && x.mc_offset == mc_offset && x.size == size;
  });
  if (b == bindings.end()) return false;
  bindings.erase(b);
  return true;
}

std::vector<MulticastDropped> MulticastTable::Drop(MulticastKey key) {
  std::vector<MulticastMapping> gone;
  for (const MulticastMapping& m : Mappings()) {
    if (m.key == key) gone.push_back(m);
  }
  std::vector<MulticastDropped> dropped;
  for (const MulticastMapping& m : gone) {
    for (auto& d : RemoveMappings(m.address, m.size)) dropped.push_back(std::move(d));
  }
  std::lock_guard lock(mutex_);
  if (MulticastObjectInfo* o = InfoLocked(key)) {
    o->dropped = true;
    o->devices.clear();
    o->bindings.clear();
  }
  return dropped;
}

bool MulticastTable::AddMapping(CUdeviceptr address, uint64_t size, uint64_t offset,
                                uint64_t flags, MulticastKey key, uint64_t logical) {
  std::lock_guard lock(mutex_);
  MulticastMapping m;
  m.address = address;
  m.size = size;
  m.offset = offset;
  m.flags = flags;
  m.key = key;
  m.logical = logical;
  if (!AddMappingLocked(m)) return false;
  MulticastObjectInfo* o = InfoLocked(key);
  o->extent = std::max(o->extent, offset + size);
  return true;
}

std::vector<proto::Record> MulticastTable::Inspect() const {
  std::lock_guard lock(mutex_);
  std::vector<proto::Record> records;
  ForEachLocked([&](const MulticastObjectInfo& o) {
    if (o.dropped) return;
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
  });
  for (const auto& [address, m] : mappings_) {
    proto::Record r = ObjectRecord(*InfoLocked(m.key), proto::RecordKind::kMulticastMapping);
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
  ForEachLocked([&](const MulticastObjectInfo& o) {
    if (o.dropped) return;
    count += 1 + o.devices.size() + o.bindings.size();
  });
  return count;
}

std::vector<MulticastObjectInfo> MulticastTable::Objects() const {
  std::lock_guard lock(mutex_);
  std::vector<MulticastObjectInfo> out;
  out.reserve(ObjectCountLocked());
  ForEachLocked([&](const MulticastObjectInfo& o) {
    if (!o.dropped) out.push_back(o);
  });
  return out;
}

}  // namespace cusnap::shim
