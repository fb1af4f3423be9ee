// The lifecycle's work on unicast memory (LifecycleSteps, lifecycle.h) over this process's
// sharing table: what kSave, kRelease, kReallocate and kImport do to each tracked
// allocation. DRIVER-FACTS F6 is the sequence followed; it is the only one that works:
//   creator: carrier D2H, unmap (VA reservation kept), release; native cycle; fresh
//            cuMemCreate, map at the same VAs, carrier H2D, access, export again.
//   importer: unmap, release; native cycle; import a fresh descriptor, map at the old VAs.
// Every driver call runs in the allocation's recorded context (SPEC-REFERENCE K.3 #6: when
// none was recorded, its device's primary context).
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "common/protocol.h"
#include "common/unique_fd.h"
#include "shim/carrier/carrier.h"
#include "shim/driver/driver_api.h"
#include "shim/tables/export_cache.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/lifecycle_common.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

class UnicastSteps final : public LifecycleSteps {
 public:
  /// Every reference stays in use for the object's lifetime.
  UnicastSteps(const DriverApi& api, SharingTable& table, ExportCache& cache,
               HostCarrier& carrier, ExportFetcher fetch, HeldAsker ask_held);

  /// Refuses (CUDA_ERROR_INVALID_VALUE, nothing changed) a mapping whose access is
  /// unknown; otherwise copies every allocation this process created that still has a
  /// logical handle or a mapping into the carrier (to its files, for a dump's
  /// `carrier_path`).
  Result<StepResult> Save(const std::string& carrier_path) override;
  /// Unmaps every tracked mapping, releases every real handle (creator and importer), and
  /// closes the export cache's descriptors, keeping who imported them (Reallocate asks them).
  /// Reservations stay: they are the application's.
  Status Release() override;
  /// Creators: fresh allocations with the recorded properties, mapped at the recorded VAs
  /// and offsets, carrier H2D, access re-applied, logical handles repointed, export cache
  /// refilled for the allocations that were shared. Locations and access use the recorded
  /// ordinals: after a restore onto other GPUs they name the GPUs the process now runs on
  /// (DRIVER-FACTS F7). Refused first, nothing created (status -1, naming the importer and
  /// the allocation), while a live importer of an allocation to be created again still holds
  /// it from before the release: the fresh allocation would not be the memory it maps.
  Result<StepResult> Reallocate() override;
  /// The carrier's WriteFile / ReadFile (carrier.h).
  Result<StepResult> WriteCarrier(const std::string& path) override;
  Result<StepResult> ReadCarrier(const std::string& dir) override;
  /// gpu_identity.h, CheckDevicesAfterMove, over this process's driver.
  Status CheckDevicesAfterMove(const std::string& device_map) override;
  /// Importers: a fresh descriptor from each creator, imported and closed at once, mapped
  /// at the recorded VAs, access re-applied, logical handles repointed. An allocation whose
  /// creator exited is skipped: its mappings leave the table and are logged as unmapped.
  Status Import() override;
  /// Forgets what Save kept.
  void Discard() override;

 private:
  // One allocation taken apart by this cycle, as recorded at Save/Release.
  struct Held {
    AllocationKey key = 0;
    proto::ObjectId id{};
    proto::Capability capability{};
    size_t size = 0;
    CUmemAllocationProp prop{};
    CUcontext context = nullptr;
    CUdevice device = 0;
    bool creator = false;
    bool shared = false;
    bool saved = false;  // its bytes are in the carrier (slot order = order in held_)
    CUmemGenericAllocationHandle real = 0;  // the driver handle now behind it
    // What this cycle did to it so far: each step skips what an earlier, failed attempt
    // of it already did (every step can be run again).
    bool released = false;   // its handle was released (kRelease)
    bool restored = false;   // created or imported again and mapped at every VA
    bool exported = false;   // its fresh descriptor is in the export cache
    bool orphaned = false;   // imported from a creator that exited: cannot come back
    std::vector<char> mapped;  // per mappings_ index: mapped again by this cycle
  };

  Result<CUcontext> ContextFor(const AllocationInfo& allocation,
                               const std::vector<MappingInfo>& mappings);
  Result<CUdevice> DeviceOf(CUcontext context);
  // Maps `real` at every recorded VA of `held` with its access (all or nothing).
  Status MapAll(Held& held, CUmemGenericAllocationHandle real);
  Status MapOne(const Held& held, const MappingInfo& m, CUmemGenericAllocationHandle real);
  void UnmapAll(Held& held);
  // MapAll, then repoints the logical handles; on failure `real` is released again.
  Status Rebuild(Held& held, CUmemGenericAllocationHandle real);
  // True when the process that created `id` still runs (same start time, not a zombie left
  // for its parent to reap); an Error naming the
  // allocation when this process cannot tell (no descriptor free to read /proc): no verdict.
  static Result<bool> CreatorAlive(const proto::ObjectId& id);
  // An import whose creator exited: its mappings leave the table, named in the log.
  void Orphan(Held& held);
  // Reallocate's precondition: no live importer holds an allocation about to be created again.
  Status ImportersReleased();

  const DriverApi& api_;
  SharingTable& table_;
  ExportCache& cache_;
  HostCarrier& carrier_;
  ExportFetcher fetch_;
  HeldAsker ask_held_;
  std::vector<proto::Importer> importers_;  // of what the export cache held at kRelease
  std::vector<Held> held_;                 // from Save until Discard
  std::vector<MappingInfo> mappings_;      // the tracked mappings at Save
  std::vector<char> unmapped_;             // per mappings_ index: unmapped by kRelease
  CUcontext primary_[32] = {};             // primary contexts retained, by device ordinal
};

}  // namespace cusnap::shim
