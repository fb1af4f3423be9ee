// What the unicast and the multicast tables (sharing_table.h, multicast_table.h) both keep:
// objects named by logical handles (DESIGN.md, "Handles"), looked up by key, by handle and by
// object id, each holding exactly one real handle that is released when its last logical
// handle, mapping and pin are gone; and their mappings by VA range (mapping_index.h). One
// mutex guards it all; the public members take it, the *Locked ones expect the caller (the
// derived table) to hold it. No driver calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"
#include "shim/tables/handles.h"
#include "shim/tables/mapping_index.h"

namespace cusnap::shim {

/// An object that lost its last reference: the caller releases `real` through the driver
/// (when has_real) and, for a creator, drops the export cache entry of `id`.
struct Dropped {
  proto::ObjectId id{};
  bool creator = false;
  bool has_real = false;
  CUmemGenericAllocationHandle real = 0;
};

/// Reference counts of logical handle values (DESIGN.md, "Handles"): one per
/// create/import/alias/retain not yet released; a value dies with its last reference and
/// cuMemRetainAllocationHandle may bring it back. `Key` names the table's object.
template <typename Key>
class HandleReferences {
 public:
  /// A new handle value with its first reference (a value already here is left as it is).
  void Add(uint64_t handle, Key key) { by_handle_.emplace(handle, Entry{key, 1}); }

  /// One more reference on `handle`, naming `key` (brought back to life if it had died).
  void Retain(uint64_t handle, Key key) {
    Entry& entry = by_handle_[handle];
    entry.key = key;
    ++entry.references;
  }

  /// The object `handle` names; nullopt when unknown.
  std::optional<Key> Find(uint64_t handle) const {
    auto it = by_handle_.find(handle);
    if (it == by_handle_.end()) return std::nullopt;
    return it->second.key;
  }

  bool Knows(uint64_t handle) const { return by_handle_.count(handle) != 0; }

  /// Drops one reference on `handle` (forgetting it with its last); returns the object it
  /// named, nullopt when unknown.
  std::optional<Key> Release(uint64_t handle) {
    auto it = by_handle_.find(handle);
    if (it == by_handle_.end()) return std::nullopt;
    const Key key = it->second.key;
    if (--it->second.references == 0) by_handle_.erase(it);
    return key;
  }

 private:
  struct Entry {
    Key key{};
    uint32_t references = 0;
  };
  std::unordered_map<uint64_t, Entry> by_handle_;
};

/// Objects described by `Info` (fields key, id, creator, has_real, real, handles, mappings)
/// and their mappings described by `Mapping` (fields address, size, key, logical and the
/// access list MappingIndex wants). Thread-safe through its mutex.
template <typename Info, typename Mapping>
class HandleTable {
 public:
  using Key = uint64_t;

  /// True when `handle` is a logical handle the table knows.
  bool Knows(uint64_t handle) const {
    std::lock_guard lock(mutex_);
    return handles_.Knows(handle);
  }

  /// Ends a pin; returns the object when that was its last reference.
  std::optional<Dropped> Unpin(Key key) {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end() || it->second.pins == 0) return std::nullopt;
    --it->second.pins;
    return DropIfUnusedLocked(key);
  }

  /// Drops one reference on logical `handle` (the value dies with its last reference).
  /// Returns false when unknown; `*dropped` gets the object when that was its last
  /// reference.
  bool ReleaseHandle(uint64_t handle, std::optional<Dropped>* dropped) {
    std::lock_guard lock(mutex_);
    dropped->reset();
    const std::optional<Key> key = handles_.Release(handle);
    if (!key) return false;
    --objects_.at(*key).info.handles;
    *dropped = DropIfUnusedLocked(*key);
    return true;
  }

  /// cuMemRetainAllocationHandle: when a mapping contains `address`, one more reference on
  /// the logical handle value the range was mapped with ("the handle is guaranteed to be the
  /// same handle value used to map the memory", CUDA Driver API), brought back to life if
  /// the application had released it; nullopt otherwise. O(log mappings).
  std::optional<uint64_t> RetainAt(CUdeviceptr address) {
    std::lock_guard lock(mutex_);
    const Mapping* mapping = mappings_.Containing(address);
    if (mapping == nullptr) return std::nullopt;
    handles_.Retain(mapping->logical, mapping->key);
    ++objects_.at(mapping->key).info.handles;
    return mapping->logical;
  }

  /// How [address, address+size) relates to the mappings (lock-free kNone when there are
  /// none: the hot paths of the other table pass here).
  RangeMatch Classify(CUdeviceptr address, size_t size) const {
    if (mapping_count_.load(std::memory_order_acquire) == 0) return RangeMatch::kNone;
    std::lock_guard lock(mutex_);
    return mappings_.Classify(address, size);
  }

  /// Removes every mapping inside [address, address+size) (after the driver unmapped it);
  /// returns the objects that lost their last reference.
  std::vector<Dropped> RemoveMappings(CUdeviceptr address, size_t size) {
    std::lock_guard lock(mutex_);
    std::vector<Dropped> dropped;
    mappings_.RemoveInside(address, size, [&](const Mapping& removed) {
      --objects_.at(removed.key).info.mappings;
      if (auto d = DropIfUnusedLocked(removed.key)) dropped.push_back(*d);
    });
    mapping_count_.store(mappings_.size(), std::memory_order_release);
    return dropped;
  }

  /// True when merging `count` descriptors into every mapping inside the range keeps each
  /// within proto::kMaxAccess distinct locations.
  bool AccessFits(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc,
                  size_t count) const {
    std::lock_guard lock(mutex_);
    return mappings_.AccessFits(address, size, desc, count);
  }

  /// After a successful cuMemSetAccess: merges the descriptors, per location, into every
  /// mapping inside the range. A descriptor with no access (PROT_NONE) removes that location.
  void MergeAccess(CUdeviceptr address, size_t size, const CUmemAccessDesc* desc, size_t count) {
    std::lock_guard lock(mutex_);
    mappings_.MergeAccess(address, size, desc, count);
  }

  /// Replaces the real handle of object `key` (lifecycle: release / reallocate / rebuild).
  /// Returns false when the key is unknown.
  bool SetRealHandle(Key key, std::optional<CUmemGenericAllocationHandle> real) {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return false;
    it->second.info.has_real = real.has_value();
    it->second.info.real = real.value_or(0);
    return true;
  }

  /// Copies of every mapping, in address order.
  std::vector<Mapping> Mappings() const {
    std::lock_guard lock(mutex_);
    std::vector<Mapping> out;
    out.reserve(mappings_.size());
    for (const auto& [address, m] : mappings_) out.push_back(m);
    return out;
  }

  /// The mutex, for the process's fork handlers only (process.cc): the prepare handler takes
  /// it so the child never inherits a half-updated table.
  std::mutex& mutex() { return mutex_; }

 protected:
  /// `counter` mints this table's logical handle values.
  explicit HandleTable(LogicalHandleCounter counter) : counter_(counter) {}

  /// A new object's entry: `real` (valid) in `context`, created here or imported (imports
  /// are shared from the start); the caller fills in what is particular to its kind.
  static Info NewInfo(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                      CUcontext context, bool creator) {
    Info info;
    info.id = id;
    info.context = context;
    info.has_real = true;
    info.real = real;
    info.creator = creator;
    info.shared = !creator;
    return info;
  }

  /// Object id of a new object this process creates (next local id).
  proto::ObjectId NewIdLocked(const ProcessIdentity& self) {
    proto::ObjectId id{};
    id.creator_pid = self.pid;
    id.creator_start = self.start_time;
    id.local_id = next_local_id_++;
    return id;
  }

  /// Records `info` (its key assigned here) with its first logical handle; 0 when the
  /// counter is exhausted (nothing recorded).
  uint64_t AddLocked(Info info) {
    const Key key = next_key_++;
    info.key = key;
    info.handles = 0;
    objects_.emplace(key, Slot{info, 0});
    const uint64_t handle = NewHandleLocked(key);
    if (handle == 0) {
      objects_.erase(key);
      return 0;
    }
    by_id_.emplace(info.id, key);
    return handle;
  }

  /// Records an import `info` and returns a logical handle. When the object is here already
  /// (another thread recorded it meanwhile) the handle aliases it and `*duplicate_real` is
  /// set: the caller releases info.real (one real handle per object).
  uint64_t AddImportedLocked(const Info& info, bool* duplicate_real) {
    *duplicate_real = false;
    if (auto it = by_id_.find(info.id); it != by_id_.end()) {
      *duplicate_real = true;
      return NewHandleLocked(it->second);
    }
    return AddLocked(info);
  }

  /// A new logical handle for object `id` when this table holds it, with the object;
  /// nullopt otherwise (or when the counter is exhausted).
  std::optional<std::pair<uint64_t, Info*>> AliasLocked(const proto::ObjectId& id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return std::nullopt;
    const uint64_t handle = NewHandleLocked(it->second);
    if (handle == 0) return std::nullopt;
    return std::make_pair(handle, &objects_.at(it->second).info);
  }

  /// The object logical `handle` names, or null.
  Info* FindLocked(uint64_t handle) {
    const std::optional<Key> key = handles_.Find(handle);
    return key ? &objects_.at(*key).info : nullptr;
  }
  const Info* FindLocked(uint64_t handle) const {
    const std::optional<Key> key = handles_.Find(handle);
    return key ? &objects_.at(*key).info : nullptr;
  }

  /// The object named `id`, or null.
  const Info* FindByIdLocked(const proto::ObjectId& id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &objects_.at(it->second).info;
  }

  /// The object of `key`, or null.
  Info* InfoLocked(Key key) {
    auto it = objects_.find(key);
    return it == objects_.end() ? nullptr : &it->second.info;
  }
  const Info* InfoLocked(Key key) const {
    auto it = objects_.find(key);
    return it == objects_.end() ? nullptr : &it->second.info;
  }

  /// Pins the object behind logical `handle` (its real handle stays valid until Unpin);
  /// null when the handle is unknown.
  const Info* PinLocked(uint64_t handle) {
    const std::optional<Key> key = handles_.Find(handle);
    if (!key) return nullptr;
    Slot& slot = objects_.at(*key);
    ++slot.pins;
    return &slot.info;
  }

  /// Records `mapping` of object mapping.key; false (nothing recorded) when the object is
  /// unknown or the range overlaps a mapping.
  bool AddMappingLocked(const Mapping& mapping) {
    auto object = objects_.find(mapping.key);
    if (object == objects_.end()) return false;
    if (!mappings_.Add(mapping)) return false;
    mapping_count_.store(mappings_.size(), std::memory_order_release);
    ++object->second.info.mappings;
    return true;
  }

  /// Calls `f(info)` for every object, in object id order (stable across INSPECTs).
  template <typename F>
  void ForEachLocked(F&& f) const {
    for (const auto& [id, key] : by_id_) f(objects_.at(key).info);
  }

  size_t ObjectCountLocked() const { return objects_.size(); }

  mutable std::mutex mutex_;
  MappingIndex<Mapping> mappings_;

 private:
  struct Slot {
    Info info;
    uint32_t pins = 0;
  };
  struct IdLess {
    bool operator()(const proto::ObjectId& a, const proto::ObjectId& b) const {
      return std::tie(a.creator_pid, a.creator_start, a.local_id) <
             std::tie(b.creator_pid, b.creator_start, b.local_id);
    }
  };

  uint64_t NewHandleLocked(Key key) {
    const uint64_t handle = counter_.Next();
    if (handle == 0) return 0;
    handles_.Add(handle, key);
    ++objects_.at(key).info.handles;
    return handle;
  }

  std::optional<Dropped> DropIfUnusedLocked(Key key) {
    auto it = objects_.find(key);
    if (it == objects_.end()) return std::nullopt;
    const Info& o = it->second.info;
    if (o.handles != 0 || o.mappings != 0 || it->second.pins != 0) return std::nullopt;
    Dropped dropped{o.id, o.creator, o.has_real, o.real};
    by_id_.erase(o.id);
    objects_.erase(it);
    return dropped;
  }

  LogicalHandleCounter counter_;
  Key next_key_ = 1;
  uint64_t next_local_id_ = 1;
  std::unordered_map<Key, Slot> objects_;
  HandleReferences<Key> handles_;                        // logical handle -> object
  std::map<proto::ObjectId, Key, IdLess> by_id_;
  std::atomic<size_t> mapping_count_{0};  // mappings_.size(), read without the lock
};

}  // namespace cusnap::shim
