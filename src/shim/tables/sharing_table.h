// The process's sharing table (DESIGN.md, "Handles"): tracked allocations, the logical
// handles that name them, their mappings indexed by VA range with access merged per device,
// and the live untracked imports with their mappings (untracked_imports.h); the handle and
// mapping bookkeeping it shares with the multicast table is HandleTable's. It makes no
// driver calls: hooks (vmm.cc) call
// the driver between table operations, never under the table's lock, and pin an allocation
// while they use its real handle outside the lock.
//
// Driver semantics followed (CUDA Driver API, "Virtual Memory Management": cuMemRelease,
// cuMemUnmap): an allocation lives while a handle or a mapping references it. Here the
// process holds exactly one real handle per tracked allocation; it is released when the
// last logical handle, mapping and pin are gone (the table then reports a Dropped
// allocation for the caller to release and to drop from the export cache).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/ids.h"
#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"
#include "shim/tables/handle_table.h"
#include "shim/tables/mapping_index.h"
#include "shim/tables/untracked_imports.h"

namespace cusnap::shim {

/// Key of an allocation inside this process's table (not an identity across processes).
using AllocationKey = uint64_t;

/// A pinned allocation: `real` stays valid (the table keeps the allocation) until Unpin.
struct Pinned {
  AllocationKey key = 0;
  proto::ObjectId id{};
  proto::Capability capability{};  ///< what its tickets carry (capabilities.h)
  size_t size = 0;  ///< bytes
  bool creator = false;
  bool has_real = false;
  CUmemGenericAllocationHandle real = 0;
};

/// A copy of one allocation's entry (for the lifecycle and for tests).
struct AllocationInfo {
  AllocationKey key = 0;
  proto::ObjectId id{};
  /// What its tickets carry and kExport requests prove: the creator's CapabilityOf, or the
  /// one the imported ticket carried (capabilities.h).
  proto::Capability capability{};
  size_t size = 0;                 ///< bytes
  CUmemAllocationProp prop{};
  CUcontext context = nullptr;     ///< context it was used in (export/import), may be null
  bool has_real = false;           ///< a real handle of value 0 is valid, hence the flag
  CUmemGenericAllocationHandle real = 0;
  bool creator = false;
  bool shared = false;             ///< exported or imported at least once (sticky)
  uint32_t handles = 0;            ///< live logical handles
  uint32_t mappings = 0;
};

/// A copy of one tracked mapping.
struct MappingInfo {
  CUdeviceptr address = 0;
  size_t size = 0;                 ///< bytes
  size_t offset = 0;               ///< bytes into the allocation
  AllocationKey key = 0;
  uint64_t logical = 0;            ///< the logical handle value it was mapped with
  uint32_t access_count = 0;
  proto::AccessRecord access[proto::kMaxAccess]{};
};

/// Totals for kIdentify.
struct TableCounts {
  uint64_t records = 0;            ///< what Inspect() would return
  uint64_t allocations = 0;
  uint64_t mappings = 0;
  uint64_t untracked_imports = 0;  ///< live allocations from non-ticket imports
  uint64_t tracked_bytes = 0;      ///< sum of tracked allocation sizes
  uint32_t created_total = 0;      ///< tracked cuMemCreate calls over the process's life
  uint32_t created_host_numa = 0;  ///< of which located on the host (HOST_NUMA*, DRIVER-FACTS:
                                   ///< NCCL creates and exports a few, then may release them)
};

class SharingTable : public HandleTable<AllocationInfo, MappingInfo> {
 public:
  SharingTable() : HandleTable(LogicalHandleCounter()) {}

  /// Records an allocation this process created and returns its first logical handle
  /// (0 when the logical counter is exhausted: nothing recorded, the caller releases real).
  uint64_t AddCreated(CUmemGenericAllocationHandle real, size_t size,
                      const CUmemAllocationProp& prop, CUcontext context,
                      const ProcessIdentity& self);

  /// A new logical handle for allocation `id` when this process already holds it (an
  /// earlier import, or its own allocation); nullopt otherwise.
  std::optional<uint64_t> AliasById(const proto::ObjectId& id);

  /// Records an import of `id` (its ticket carried `capability`) backed by `real` and returns
  /// a logical handle. When another thread recorded the same allocation meanwhile, the handle
  /// aliases it and `*duplicate_real` is set: the caller releases `real` (one real handle per
  /// allocation).
  uint64_t AddImported(const proto::ObjectId& id, const proto::Capability& capability,
                       CUmemGenericAllocationHandle real,
                       size_t size, const CUmemAllocationProp& prop, CUcontext context,
                       bool* duplicate_real);

  /// The tracked mapping containing `address`, if any: its start VA and size in bytes.
  /// cuMemGetAddressRange answers from it (the real driver reports base 0 for an imported
  /// HOST_NUMA mapping, measured on our H200s; and the range is ours to keep across restore).
  std::optional<std::pair<CUdeviceptr, size_t>> MappingRangeAt(CUdeviceptr address) const;

  /// For a logical handle of an IMPORTED allocation: the properties the driver reported at
  /// import. Measured on our H200s: after a restore onto swapped GPUs the driver reports an
  /// imported allocation's location by the physical GPU's original ordinal, not by the
  /// importer's own (unchanged) ordinals, so the import-time answer is the stable one.
  /// nullopt for unknown handles and for allocations this process created.
  std::optional<CUmemAllocationProp> ImportedProperties(uint64_t handle) const;

  /// Pins the allocation behind logical `handle` so its real handle stays valid outside the
  /// lock; nullopt when the handle is unknown.
  std::optional<Pinned> Pin(uint64_t handle);

  /// Marks the allocation shared (sticky) and remembers `context` as the one it is used in.
  void MarkShared(AllocationKey key, CUcontext context);

  /// Records a mapping of [address, address+size) at `offset` bytes into allocation `key`,
  /// made with logical handle `logical`, after the driver mapped it. False (nothing
  /// recorded) when it overlaps a tracked mapping.
  bool AddMapping(CUdeviceptr address, size_t size, size_t offset, AllocationKey key,
                  uint64_t logical);

  /// Records a real handle returned by a non-ticket import of shareable handle type `type`;
  /// `prop` is the driver's answer for it at import (null when it gave none).
  void CountUntrackedImport(CUmemGenericAllocationHandle real, const CUmemAllocationProp* prop,
                            CUmemAllocationHandleType type);
  /// When `real` is a live untracked import, adds one more reference (a retain).
  void NoteUntrackedRetain(CUmemGenericAllocationHandle real);
  /// After the driver released raw handle `real`: one reference less, if it is an untracked
  /// import (which lives on while mapped).
  void ForgetUntrackedImport(CUmemGenericAllocationHandle real);
  /// After the driver mapped raw handle `real` at [address, address+size), `offset` bytes
  /// in: recorded when `real` is an untracked import. One atomic load when there is none
  /// (every untracked cuMemMap calls this).
  void NoteUntrackedMapping(CUdeviceptr address, size_t size, size_t offset,
                            CUmemGenericAllocationHandle real);
  /// After the driver unmapped [address, address+size): forgets the untracked imports'
  /// mappings inside it. One atomic load when there is no untracked import.
  void ForgetUntrackedMappings(CUdeviceptr address, size_t size);
  /// kIdentify's kUntrackedImport records: the first proto::kMaxUntrackedReported live
  /// untracked imports, one record per mapping (one with address 0 when unmapped).
  std::vector<proto::Record> UntrackedRecords() const;

  TableCounts Counts() const;

  /// The table as INSPECT records: one kAllocation per allocation, then one kMapping per
  /// mapping in address order.
  std::vector<proto::Record> Inspect() const;

  /// Copies of every allocation (the lifecycle iterates these; Mappings() the mappings).
  std::vector<AllocationInfo> Allocations() const;

  /// Those of `ids` this process holds a real handle of, in the order given (kHeldAllocations:
  /// an import is held from its import until the lifecycle's release or its last reference).
  std::vector<proto::ObjectId> Held(const std::vector<proto::ObjectId>& ids) const;

 private:
  static AllocationInfo NewAllocation(const proto::ObjectId& id, CUmemGenericAllocationHandle real,
                                      size_t size, const CUmemAllocationProp& prop,
                                      CUcontext context, bool creator);

  UntrackedImports untracked_;
  // untracked_.size(), stored under the lock and read without it so that untracked map,
  // unmap, retain and release calls skip the lock while no untracked import is live. Safe:
  // the application cannot use a handle before the import that returned it has returned.
  std::atomic<size_t> untracked_live_{0};
  uint32_t created_total_ = 0;
  uint32_t created_host_numa_ = 0;
};

}  // namespace cusnap::shim
