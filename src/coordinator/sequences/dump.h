// `cusnap dump` and `cusnap restore --images-dir` (DESIGN.md, "Main job"): the checkpoint and
// restore sequences with CRIU around them, so the job goes to disk and comes back in new
// processes. Each is a list of named phases like the others (sequence.h):
//
//   dump:    check_images -> <every checkpoint phase> -> criu_dump -> write_manifest
//            [-> <every restore phase>, with --leave-running]
//   restore: check_images -> criu_restore -> <every restore phase>
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "coordinator/sequences/commands.h"

namespace cusnap::coord {

struct DumpOptions {
  CheckpointOptions checkpoint;  ///< state_dir is the images directory
  int root_pid = 0;              ///< the tree CRIU dumps
  std::string control_dir;       ///< endpoints live here (to continue a held job in place)
  bool leave_running = false;    ///< resume the job in place after the dump
  bool own_pid_namespace = false;  ///< the job runs in a PID namespace of its own (manifest)
  std::string cusnap_version;    ///< for the manifest
};

/// Checkpoints the job (Checkpoint), dumps its tree with CRIU into the images directory and
/// writes the manifest (images.h). Refused (kRefused, nothing changed) when CRIU is missing
/// or the directory holds the dump of another job that still runs. A CRIU failure leaves the
/// processes alive (CRIU resumes them): the job is restored in place (kRolledForward, or
/// kFailedAfterChange when that fails too).
CommandReport Dump(const DumpOptions& options, const Discoverer& discover,
                   CheckpointDriver& driver, PhaseObserver& observer, Interrupt* interrupt);

struct ImagesRestoreOptions {
  std::string images_dir;
  std::string control_dir;  ///< endpoints live here; restored/ gets the identity aliases
  std::vector<DevicePair> device_map;
  /// As RestoreOptions::lease_ms (coordinator.h).
  uint64_t lease_ms = 0;
  /// The discoverer of the tree CRIU brought back, under its root pid.
  std::function<Discoverer(int root_pid)> discoverer_for;
  /// Not 0: the root (pid in this PID namespace) of the tree an interrupted restore from
  /// images_dir had CRIU bring back (restore_record.h): CRIU does not run again, the restore
  /// goes on with that tree.
  int resume_root = 0;
};

/// Checks the images (CheckImages: refused with nothing changed, kRestoreRefused), brings the
/// tree back with CRIU, then runs every restore phase (Restore) on it.
CommandReport RestoreImages(const ImagesRestoreOptions& options, CheckpointDriver& driver,
                            PhaseObserver& observer, Interrupt* interrupt);

/// Phases a full dump and a full images restore print (the progress bar counts them).
extern const size_t kDumpPhaseCount;
extern const size_t kImagesRestorePhaseCount;

}  // namespace cusnap::coord
