// The state file <state dir>/cusnap-state.json (DESIGN.md, "State file"): what a checkpoint
// recorded, and restore's oracle. Format version, participants (pid, start time, GPU UUIDs),
// per participant the topology records by name, byte counts and phase timings. Never
// descriptors, raw handles or bytes of memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/protocol.h"
#include "coordinator/state_guard.h"

namespace cusnap::coord {

/// Version 2: the checkpoint's id (a restore refuses a file of another checkpoint). Version 3:
/// "digest", the SHA-256 of the rest of the document (DocumentDigest): a file changed after the
/// checkpoint wrote it is refused before anything changes (a record edited with the id kept
/// would otherwise fail every restore's verify, after the job was changed).
inline constexpr int kStateFormatVersion = 3;
inline constexpr const char* kStateFileName = "cusnap-state.json";

/// A GPU a participant's records name: the device ordinal as the participant itself numbers
/// it (its CUDA_VISIBLE_DEVICES applied; the ordinals in its records), and its UUID (the key
/// of CUcheckpointGpuPair), from the participant's own INSPECT device list.
struct GpuRef {
  int ordinal = 0;
  std::string uuid;
  bool operator==(const GpuRef&) const = default;
};

/// One participant as the checkpoint saw it.
struct ParticipantState {
  int pid = 0;
  uint64_t start_time = 0;              ///< clock ticks since boot (/proc/<pid>/stat field 22)
  std::vector<GpuRef> gpus;             ///< devices its records name
  uint64_t saved_bytes = 0;             ///< bytes the carrier moved in SAVE
  std::vector<proto::Record> records;   ///< INSPECT taken while quiesced
};

/// One phase of the command that wrote the file.
struct PhaseTiming {
  std::string name;
  double elapsed_ms = 0;
  uint64_t bytes = 0;
};

/// The whole file.
struct StateFile {
  int format_version = kStateFormatVersion;
  std::string driver;                   ///< "simulated" or "NVIDIA ..."
  int64_t created_unix_s = 0;
  /// The checkpoint this file belongs to: every shim was given it in kSave and reports it in
  /// kIdentify until the checkpoint ends (NewCheckpointId).
  std::string checkpoint_id;
  std::vector<ParticipantState> participants;
  std::vector<PhaseTiming> phases;
};

/// A fresh checkpoint id: the wall-clock time in seconds and 64 random bits, in hex
/// ("<seconds>-<random>"), so ids of two checkpoints never match and sort by age.
std::string NewCheckpointId();

/// Path of the state file inside `state_dir`.
std::string StateFilePath(const std::string& state_dir);

/// The document as JSON (what `inspect --json` prints), its "digest" included.
nlohmann::json StateToJson(const StateFile& state);

/// "sha256:<hex>" of `document` without its "digest" member, serialized compactly (object
/// keys sorted: nlohmann's order), which a parse and a dump reproduce exactly.
/// The state file's and the images manifest's (images.h).
std::string DocumentDigest(const nlohmann::json& document);

/// Parses and validates a document: format version, structure, field types, then its digest
/// (a document changed since it was written: an error saying so). The error's message names
/// `origin` (a path) and the bad field.
Result<StateFile> StateFromJson(const nlohmann::json& json, const std::string& origin);

/// Creates `state_dir` (mode 0700, parents too) if missing, refuses an unsafe existing one
/// (state_guard.h, EnsureStateDir; never re-moded) and proves a file can be created there (a temporary file, removed again). Run before anything destructive so an
/// unwritable directory refuses the checkpoint with the job untouched. errno-coded Error.
/// The directories it created are appended to `created` (EnsureStateDir).
Status PrepareStateDir(const std::string& state_dir, std::vector<std::string>* created = nullptr,
                       DirectoryRole role = kStateDirectory);

/// Writes `text` to `<dir>/<name>` atomically and durably, as WriteStateFile does (also the
/// images manifest, images.h). errno-coded Error naming the path.
Status WriteFileDurably(const std::string& dir, const std::string& name, const std::string& text);

/// Removes `<dir>/<name>` durably (unlink, then fsync of the directory); a missing file is
/// fine. errno-coded Error naming the path.
Status RemoveFileDurably(const std::string& dir, const std::string& name);

/// Writes the state file atomically: a temporary file in the same directory, fsync of the
/// file, rename over cusnap-state.json, fsync of the directory (without the last step the
/// rename is not durable). errno-coded Error naming the path.
Status WriteStateFile(const std::string& state_dir, const StateFile& state);

/// Removes the state file of a checkpoint that was rolled back (the job runs on, nothing
/// to restore), and syncs the directory. A missing file is not an error; errno-coded Error.
Status RemoveStateFile(const std::string& state_dir);

/// Renames an unusable state file (one ReadStateFile refuses) out of the way, to
/// "cusnap-state.json.unusable-<unix seconds>[.<n>]" in the same directory, and syncs the
/// directory: kept for a look, no longer in the way of the next checkpoint (which refuses
/// to overwrite a file it cannot read, state_guard.h). Returns the new path; an errno-coded
/// Error naming both paths when the rename fails.
Result<std::string> SetAsideStateFile(const std::string& state_dir);

/// The most bytes a state file may hold (about 400,000 records); a larger one is refused.
inline constexpr size_t kMaxStateFileBytes = size_t{256} << 20;

/// Reads and validates the state file. Errors: missing file (ENOENT, "no checkpoint in
/// <dir>"), unreadable (ReadStateText), not JSON, wrong format version, bad structure, a
/// number out of its range (a pid beyond 2^22, a negative size).
Result<StateFile> ReadStateFile(const std::string& state_dir);

/// The state file's bytes, read safely: opened relative to `state_dir` without following a
/// symbolic link (ELOOP) and without blocking; refused unless a regular file with one link
/// (EINVAL: FIFO, device, socket, hard link) of at most kMaxStateFileBytes (EFBIG). ENOENT
/// "no checkpoint in <dir>" when missing.
Result<std::string> ReadStateText(const std::string& state_dir);

}  // namespace cusnap::coord
