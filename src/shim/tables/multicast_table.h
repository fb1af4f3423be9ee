// The process's multicast table (DESIGN.md, "Handles"; SPEC-REFERENCE D.3): the multicast
// objects this process tracks, the logical handles that name them, the devices it added,
// the bindings it made and the multicast VAs it mapped, with their access. It is the
// application's view: the lifecycle (multicast_steps.h) takes the driver objects behind it
// apart before a checkpoint and rebuilds them after restore, and the table stays as it was.
// Like the sharing table it makes no driver calls and holds exactly one real handle per
// object (released when the last logical handle, mapping and pin are gone).
//
// Multicast logical handles carry the logical tag (handles.h) plus kMulticastHandleBit, so a
// hook tells them from allocation handles with one bit test; the sharing table's counter
// would need 2^47 allocations to reach that bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/ids.h"
#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"
#include "shim/tables/handle_table.h"
#include "shim/tables/handles.h"

namespace cusnap::shim {

inline constexpr uint64_t kMulticastHandleBit = 1ull << 47;

/// True for a logical handle of a multicast object (it may still be unknown to the table).
inline bool IsMulticastHandle(uint64_t handle) {
  return IsTagged(handle) && (handle & kMulticastHandleBit) != 0;
}

using MulticastKey = uint64_t;

/// What cuMulticastCreate was asked for (CUmulticastObjectProp), sizes in bytes.
struct MulticastProperties {
  uint32_t num_devices = 0;
  uint64_t size = 0;          ///< requested; the driver may round capacity up (DRIVER-FACTS)
  uint64_t handle_types = 0;  ///< CUmemAllocationHandleType bits
  uint64_t flags = 0;
  CUmulticastObjectProp ToDriver() const;
  static MulticastProperties FromDriver(const CUmulticastObjectProp& prop);
};

/// How a member was bound.
enum class BindKind : uint32_t { kMem = 1, kAddr = 2 };

/// One binding this process made (cuMulticastBindMem/BindAddr, either ABI).
struct MulticastBinding {
  int device = 0;              ///< the team device it is bound for (application ordinal)
  uint64_t mc_offset = 0;      ///< bytes into the multicast object
  uint64_t size = 0;           ///< bytes
  uint64_t flags = 0;          ///< bind flags
  BindKind kind = BindKind::kMem;
  uint32_t api = 1;            ///< 1: original ABI; 2: device-explicit (CUDA 13.1)
  bool tracked_member = false; ///< the member is a tracked allocation (member, member_offset)
  proto::ObjectId member{};
  uint64_t member_offset = 0;  ///< bytes into the member allocation
  CUdeviceptr address = 0;     ///< BindAddr: the member VA (rebound by address)
  CUmemGenericAllocationHandle untracked_member = 0;  ///< BindMem of an untracked handle
  CUcontext context = nullptr; ///< current at bind time (BindAddr v1 binds for its device)
};

/// One multicast VA this process mapped.
struct MulticastMapping {
  CUdeviceptr address = 0;
  uint64_t size = 0;           ///< bytes
  uint64_t offset = 0;         ///< bytes into the object
  uint64_t flags = 0;          ///< cuMemMap flags
  MulticastKey key = 0;
  uint64_t logical = 0;        ///< the logical handle it was mapped with
  uint32_t access_count = 0;
  proto::AccessRecord access[proto::kMaxAccess]{};
};

/// A copy of one object's entry.
struct MulticastObjectInfo {
  MulticastKey key = 0;
  proto::ObjectId id{};
  proto::Capability capability{};  ///< as AllocationInfo::capability
  MulticastProperties prop;
  CUcontext context = nullptr;  ///< current at create/import
  bool has_real = false;
  CUmemGenericAllocationHandle real = 0;
  bool creator = false;
  bool shared = false;          ///< exported at least once (its creator re-exports on restore)
  uint32_t handles = 0;
  uint32_t mappings = 0;
  uint64_t extent = 0;          ///< largest offset+size the driver accepted (bind or map)
  std::vector<int> devices;     ///< added by this process, in order
  std::vector<MulticastBinding> bindings;
  /// Its team lost a member (recover): never rebuilt, left out of INSPECT and Objects();
  /// the application's logical handles still name it until released.
  bool dropped = false;
};

/// A pinned object: `real` stays valid until Unpin.
struct MulticastPinned {
  MulticastKey key = 0;
  proto::ObjectId id{};
  proto::Capability capability{};
  MulticastProperties prop;
  bool creator = false;
  bool has_real = false;
  CUmemGenericAllocationHandle real = 0;
};

/// An object this process no longer references: release `real` (when has_real) and, for a
/// creator, drop its export cache entry.
using MulticastDropped = Dropped;

/// The handle and mapping bookkeeping is HandleTable's (handle_table.h), shared with the
/// sharing table; what is particular to multicast objects is here.
class MulticastTable : public HandleTable<MulticastObjectInfo, MulticastMapping> {
 public:
  MulticastTable()
      : HandleTable(LogicalHandleCounter(kMulticastHandleBit, kMulticastHandleBit - 1)) {}

  /// Records an object this process created; returns its first logical handle (0 when the
  /// counter is exhausted: nothing recorded).
  uint64_t AddCreated(CUmemGenericAllocationHandle real, const MulticastProperties& prop,
                      CUcontext context, const ProcessIdentity& self);
  /// A new logical handle for object `id` when this process holds it already.
  std::optional<uint64_t> AliasById(const proto::ObjectId& id);
  /// Records an import of `id` (properties from its ticket); `*duplicate_real` is set when
  /// another thread recorded it meanwhile (the caller releases `real`).
  uint64_t AddImported(const proto::ObjectId& id, const proto::Capability& capability,
                       CUmemGenericAllocationHandle real, const MulticastProperties& prop,
                       CUcontext context, bool* duplicate_real);

  /// Pins the object behind logical `handle` (its real handle stays valid until Unpin);
  /// nullopt when unknown.
  std::optional<MulticastPinned> Pin(uint64_t handle);

  /// Marks the object exported (its creator re-exports it on restore).
  void MarkShared(MulticastKey key);
  /// After cuMulticastAddDevice succeeded.
  void AddDevice(MulticastKey key, int device);
  /// After a bind succeeded; grows the object's extent.
  void AddBinding(MulticastKey key, const MulticastBinding& binding);
  /// After cuMulticastUnbind succeeded: forgets the binding with exactly this device,
  /// offset and size (false when none).
  bool RemoveBinding(MulticastKey key, int device, uint64_t mc_offset, uint64_t size);

  /// Recover, when a member of `key`'s team exited: forgets its devices, bindings and
  /// mappings (the VAs stay reserved, unmapped) and marks it dropped (see
  /// MulticastObjectInfo::dropped). Returns the objects that lost their last reference.
  std::vector<MulticastDropped> Drop(MulticastKey key);
  /// After cuMemMap of a multicast handle succeeded; false (nothing recorded) on overlap.
  bool AddMapping(CUdeviceptr address, uint64_t size, uint64_t offset, uint64_t flags,
                  MulticastKey key, uint64_t logical);

  /// INSPECT records, in a stable order: per object (by local id) one kMulticast, then its
  /// kMulticastDevice and kMulticastBinding records; then kMulticastMapping by address.
  std::vector<proto::Record> Inspect() const;
  /// How many records Inspect() would return.
  uint64_t RecordCount() const;
  std::vector<MulticastObjectInfo> Objects() const;

 private:
  static MulticastObjectInfo NewObject(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                                       const MulticastProperties& prop, CUcontext context,
                                       bool creator);
};

}  // namespace cusnap::shim
