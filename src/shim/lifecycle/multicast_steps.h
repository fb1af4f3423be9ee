// The lifecycle's work on multicast teams (DESIGN.md, "Lifecycle"; SPEC-REFERENCE F.3 steps
// 2 and 3-6), over this process's multicast table. The table is the application's view and
// stays as it is; these steps take the driver objects behind it apart and rebuild them.
//
//   kDetachMulticast: unmap every multicast VA (reservations stay the application's),
//     unbind every binding, release every real multicast handle and close the creator's
//     cached descriptors. Native checkpoint cannot proceed while any multicast object exists
//     (DRIVER-FACTS, public reports). Until the first release succeeded the work is undone
//     on a failure (mappings and bindings restored), so the checkpoint is refused with the
//     team intact and kResume works; after it, the failure is final.
//   After restore, in the driver's order (SPEC-REFERENCE F.4): kMulticastCreate (the
//     recorded creator creates with the requested properties and refills its export cache),
//     kMulticastImport (the others fetch a fresh descriptor from the creator), kMulticastJoin
//     (AddDevice for every recorded device; binds wait until the whole team was added, so the
//     coordinator's barrier comes next), kMulticastBind (every binding with its recorded ABI,
//     BindMem against the member's current real handle, then every multicast VA mapped again
//     with its flags and access).
//
// Device ordinals in the table are the application's and are used as they are: a restore
// onto other GPUs keeps the process's ordinals and changes the GPU behind them (DRIVER-FACTS
// F7), so the team is rebuilt on the ordinals where the members now live.
#pragma once

#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "shim/driver/driver_api.h"
#include "shim/tables/export_cache.h"
#include "shim/lifecycle/lifecycle.h"
#include "shim/lifecycle/lifecycle_common.h"
#include "shim/tables/multicast_table.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

/// The multicast step set (LifecycleSteps): every step a multicast team takes part in.
class MulticastSteps final : public LifecycleSteps {
 public:
  /// Every reference stays in use for the object's lifetime.
  MulticastSteps(const DriverApi& api, SharingTable& table, MulticastTable& multicast,
                 ExportCache& cache, ExportFetcher fetch);

  /// kDetachMulticast (see the file comment). Errors name the process, the object and the
  /// step; MulticastDestroyed() says whether the failure left anything taken apart.
  Status DetachMulticast() override;
  /// True once this cycle released a multicast handle (the team cannot be put back in
  /// place: kResume is refused, a failure is final).
  bool MulticastDestroyed() const override { return destroyed_; }
  Status MulticastCreate() override;
  Status MulticastImport() override;
  Status MulticastJoin() override;
  Status MulticastBind() override;
  /// Recover, before each rebuild step: the objects in `teams` lost a member (it exited),
  /// so this process's part of each is dropped: its handle released, its devices, bindings
  /// and mappings forgotten (the multicast VAs stay reserved, unmapped), named in the log.
  /// The rest is rebuilt as usual.
  void DropMulticast(const std::vector<proto::ObjectId>& teams) override;
  /// Forgets this cycle. MulticastDestroyed() keeps its value until the next detach.
  void Discard() override;

 private:
  const MulticastObjectInfo* Find(MulticastKey key) const;
  // Releases every held object that still has a driver handle (DetachMulticast, and its retry).
  Status ReleaseHeld();
  // Forgets which devices were added and what was bound and mapped in this cycle.
  void ResetProgress();
  Status Unbind(const MulticastObjectInfo& object, const MulticastBinding& binding);
  Status BindOne(const MulticastObjectInfo& object, const MulticastBinding& binding);
  // Maps one multicast VA with its access; all or nothing (unmapped again when the access
  // fails), so a retry maps it afresh.
  Status MapOne(const MulticastObjectInfo& object, const MulticastMapping& mapping);
  // Puts back what a failed detach undid, in reverse; false when that failed too.
  bool Undo(const std::vector<const MulticastMapping*>& unmapped,
            const std::vector<std::pair<const MulticastObjectInfo*, const MulticastBinding*>>& unbound);

  const DriverApi& api_;
  SharingTable& table_;
  MulticastTable& multicast_;
  ExportCache& cache_;
  ExportFetcher fetch_;
  std::vector<MulticastObjectInfo> held_;   // from DetachMulticast until Discard (real = now behind it)
  std::vector<MulticastMapping> mappings_;  // the multicast mappings at DetachMulticast
  bool destroyed_ = false;
  // This cycle's progress, so that each rebuild step can be run again: per held_
  // object, per device added and per binding bound; per mappings_ entry, mapped.
  std::vector<std::vector<char>> joined_;
  std::vector<std::vector<char>> bound_;
  std::vector<char> mapped_;
};

}  // namespace cusnap::shim
