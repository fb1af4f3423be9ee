// `cusnap dump` and `cusnap restore --images-dir` (DESIGN.md, "Main job"): the checkpoint and
// restore sequences with CRIU around them, so the job goes to disk and comes back in new
// processes. Each is a list of named phases like the others (sequence.h):
//
//   dump:    check_images -> <every checkpoint phase> -> criu_dump -> write_manifest
//            [-> <every restore phase>, with --leave-running]
//   restore: check_images -> criu_restore -> <every restore phase>
//
// CRIU run by someone else (libcusnap_criu.so, the CRIU plugin through which container
// engines dump and restore a job) runs the same stages, less CRIU's own:
//
//   dump (the plugin's init):     check_images -> <every checkpoint phase> -> hand_over_to_criu
//   then, once CRIU ended:        CompleteDumpByCriu (the manifest) or DiscardDumpByCriu
//   restore (the plugin's init):  check_images
//   restore (the plugin's exit):  criu_restore (the identities of what CRIU brought back)
//                                 -> <every restore phase>
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
  /// Not empty: CRIU is the caller (the plugin), and this is its version line ("Version:
  /// 4.2.1", for the manifest). The dump then stops once the job is checkpointed with its
  /// carrier files and pending manifest in the images directory (hand_over_to_criu); CRIU
  /// dumps the processes next, and the container engine that runs it decides what the job's
  /// pipes, mounts and namespaces become (runc tells CRIU), so cusnap's own CRIU
  /// preconditions are not asked.
  std::string caller_criu_version;
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
  /// Only check_images: the plugin asks before CRIU restores anything. The carriers' chunks
  /// are read and checked then too: the shims read them only once CRIU restored the processes,
  /// and then on the plugin's last hook, where a failure no longer stops CRIU.
  bool check_only = false;
  /// Not 0: CRIU (the plugin's caller) brought the tree back, with this root (pid in this PID
  /// namespace): criu_restore only gives its processes their identities, and check_images
  /// reads the manifest without hashing the files again (the plugin's check did, before
  /// CRIU restored anything).
  int criu_restored_root = 0;
};

/// The dump CRIU finished (exit status 0 of its dump, the plugin's exit hook): the pending
/// manifest that hand_over_to_criu wrote (with the carrier files' digests) becomes the
/// manifest, with every image file's size and digests (DescribeImageFiles). Errors:
/// ReadPendingManifest's, DescribeImageFiles',
/// WriteManifest's.
Status CompleteDumpByCriu(const std::string& images_dir);

/// A dump that failed once the job was checkpointed (CRIU failed, cusnap's or another's):
/// what CRIU and the checkpoint wrote into the images directory is no dump, and goes (CRIU's
/// images, the carrier files, the pending manifest, the state file); CRIU's logs stay, and
/// `inspect` names the directory as a failed dump by them. Returns what could not be removed
/// (empty when all went).
std::vector<std::string> DiscardFailedDump(const std::string& images_dir);

/// Checks the images (CheckImages: refused with nothing changed, kRestoreRefused), brings the
/// tree back with CRIU, then runs every restore phase (Restore) on it.
CommandReport RestoreImages(const ImagesRestoreOptions& options, CheckpointDriver& driver,
                            PhaseObserver& observer, Interrupt* interrupt);

/// Phases a full dump and a full images restore print (the progress bar counts them).
extern const size_t kDumpPhaseCount;
extern const size_t kImagesRestorePhaseCount;

}  // namespace cusnap::coord
