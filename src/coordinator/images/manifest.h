// The images directory of `cusnap dump` (DESIGN.md, "Main job"): CRIU's images of the job's
// process tree, the cusnap state file, and a manifest (cusnap-images.json) that makes the
// directory self-describing: who wrote it, for which driver and GPUs, how many bytes each
// participant saved, and every file's size and chunk digests (XXH3-128 per chunk,
// common/chunk_digest.h; a carrier file's chunks as its shim wrote them, its holes listed by
// no chunk: zeros). `cusnap restore --images-dir` checks it before anything changes
// (CheckImages: every file but the carriers and CRIU's page images read and checked, the
// carriers' holes checked); the page images are read beside `criu restore`, whose processes
// stay stopped until they passed, and each carrier chunk is checked as its shim reads it back;
// `cusnap inspect` prints it.
//
// A dump writes a pending manifest (cusnap-images.pending.json: the same document without
// the files) before CRIU starts, and removes it once the manifest is written (or CRIU failed
// and the job was restored in place). A CLI that dies while CRIU dumps, or right after, leaves
// the job's processes gone and no manifest: the pending one says whose dump it is, so that
// `restore --images-dir` can finish it when CRIU's images are complete
// (CompleteInterruptedDump) and `inspect` can name the state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/chunk_digest.h"
#include "common/error.h"
#include "common/messages.h"
#include "coordinator/native/device_map.h"


namespace cusnap::coord {

/// 3: each file's chunks with their XXH3-128 digests, the carriers' from their shims. Other
/// versions (1 and 2: a SHA-256 per file) are refused, naming theirs (ManifestFromJson).
inline constexpr int kManifestFormatVersion = 3;
/// The chunk the coordinator digests the files other than carriers in (CRIU's images, the
/// state file), concurrently: bytes (Manifest::chunk_bytes records it).
inline constexpr uint64_t kImageChunkBytes = uint64_t{64} << 20;
inline constexpr const char* kManifestFileName = "cusnap-images.json";
inline constexpr const char* kPendingManifestFileName = "cusnap-images.pending.json";
/// CRIU's log of `cusnap dump` in the images directory, and the line it ends with when the
/// dump is complete (criu/cr-dump.c).
inline constexpr const char* kCriuDumpLogName = "criu-dump.log";
inline constexpr const char* kCriuDumpFinished = "Dumping finished successfully";

/// One chunk of an image file: its byte range and digest.
struct ImageChunk {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  ChunkDigest digest;
  bool operator==(const ImageChunk&) const = default;
};

/// One file of the directory the manifest vouches for (CRIU's images, the carrier files and
/// the state file). Its chunks are in offset order and do not overlap; bytes no chunk covers
/// are zeros (a carrier's holes: never read back).
struct ImageFile {
  std::string name;    ///< relative to the images directory
  uint64_t bytes = 0;
  std::vector<ImageChunk> chunks;
  bool operator==(const ImageFile&) const = default;
};

/// The ImageFile of a carrier part file its shim wrote (kWriteCarrier's reply).
ImageFile ImageFileOf(const proto::CarrierFile& written);

/// A GPU of the machine, as the coordinator's driver numbers it.
struct ImagesGpu {
  int ordinal = 0;
  std::string uuid;
  std::string model;  ///< cuDeviceGetName; "" when the driver gave none
};

/// One participant of the dumped job.
struct ImagesParticipant {
  int pid = 0;
  uint64_t start_time = 0;         ///< /proc/<pid>/stat field 22 at dump time
  uint64_t saved_bytes = 0;        ///< bytes its host carrier holds (in CRIU's page images)
  std::vector<std::string> gpus;   ///< UUIDs its records name
};

/// The whole manifest.
struct Manifest {
  int format_version = kManifestFormatVersion;
  /// The chunk files other than carriers are digested in (kImageChunkBytes); a carrier's
  /// chunks are its shim's (CUSNAP_CARRIER_CHUNK_MIB, at most 64 MiB), each listed.
  uint64_t chunk_bytes = kImageChunkBytes;
  std::string cusnap_version;   ///< the build that wrote it (`cusnap --version`'s first line)
  std::string driver;           ///< CheckpointDriver::Describe(): "simulated", "NVIDIA 580..."
  std::string criu_version;     ///< `criu --version`'s first line
  int64_t created_unix_s = 0;
  std::string checkpoint_id;    ///< the state file's
  int root_pid = 0;             ///< the dumped tree's root (pid and start time at dump time)
  uint64_t root_start_time = 0;
  bool left_running = false;    ///< dumped with --leave-running: the job ran on
  /// The job ran in a PID namespace of its own (`cusnap run --pid-namespace`, or restored into
  /// one): it is restored into one again, where its session and init are as they were (in
  /// the machine's namespace it would have no session of its own, and CRIU could not dump it
  /// again). Absent in older manifests: false.
  bool own_pid_namespace = false;
  /// The control directory the job's endpoints were in (CRIU binds their sockets there again
  /// at restore); "" in manifests of cusnap before it was recorded.
  std::string control_dir;
  std::vector<ImagesGpu> gpus;  ///< every GPU of the machine at dump time
  std::vector<ImagesParticipant> participants;
  std::vector<ImageFile> files;
  /// Sum of files[].bytes.
  uint64_t TotalBytes() const;
  /// Of TotalBytes, the files CRIU wrote (the carrier files left out: carrier_files.h).
  uint64_t CriuBytes() const;
  /// Of CriuBytes, CRIU's page images (IsCriuPageImage).
  uint64_t CriuPageBytes() const;
};

/// The manifest as JSON (what `inspect --json` prints for an images directory).
nlohmann::json ManifestToJson(const Manifest& manifest);

/// Parses and validates a manifest document; the error names `origin` and the bad field.
Result<Manifest> ManifestFromJson(const nlohmann::json& json, const std::string& origin);

/// Writes <dir>/cusnap-images.json atomically and durably (WriteFileDurably).
Status WriteManifest(const std::string& dir, const Manifest& manifest);

/// Reads <dir>/cusnap-images.json. ENOENT "no images in <dir>" when missing.
Result<Manifest> ReadManifest(const std::string& dir);

/// True when `dir` holds a manifest (it is an images directory, not only a state directory).
bool HasManifest(const std::string& dir);

/// Writes <dir>/cusnap-images.pending.json (the manifest of a dump about to run CRIU, its
/// files empty) atomically and durably. errno-coded Error naming the path.
Status WritePendingManifest(const std::string& dir, const Manifest& manifest);

/// Removes <dir>/cusnap-images.pending.json durably (none: fine). errno-coded Error.
Status RemovePendingManifest(const std::string& dir);

/// True when `dir` holds a pending manifest (a dump that ran CRIU and did not finish).
bool HasPendingManifest(const std::string& dir);

/// Reads <dir>/cusnap-images.pending.json: ENOENT when missing, else as ReadManifest.
Result<Manifest> ReadPendingManifest(const std::string& dir);

/// True for a file CRIU writes into an images directory other than its logs: its images
/// (*.img), its statistics (stats-dump, stats-restore) and a restore's pid file.
bool IsCriuOutput(const std::string& name);

/// True for CRIU's page images ("pages-<n>.img"): the processes' memory, nearly all of CRIU's
/// bytes. What CRIU does with them is fill the memory of processes it leaves stopped, so a
/// restore checks them beside `criu restore` (ReadScope::kCriuPages); CRIU's other images
/// (which files, mounts, pids and sockets it makes) are checked before it runs.
bool IsCriuPageImage(const std::string& name);

/// True for a file a dump writes into its images directory and lists in its manifest: CRIU's
/// images and statistics (IsCriuOutput, less the restore's stats-restore and pid file), the
/// carrier files (IsCarrierFile, carrier_files.h) and the state file. Anything else there is
/// the user's: neither listed, checked nor removed (a notes file kept beside the images is
/// not part of the dump, so that editing it does not refuse the restore).
bool IsDumpFile(const std::string& name);

/// Removes from `dir` what an earlier dump or restore left there: CRIU's output (IsCriuOutput)
/// and the manifest, so that a dump into it holds only its own files (a thread image of an
/// older dump would otherwise be hashed into the new manifest). The state file and the logs
/// stay. Errors name the file (errno-coded).
Status RemovePreviousDump(const std::string& dir);

/// When `dir` holds no images but the state file of a checkpoint whose processes all still
/// run here (a dump stopped between its checkpoint and CRIU: the job is checkpointed in
/// place), the sentence that says so and names the command that resumes it; "" otherwise.
std::string CheckpointedInPlaceText(const std::string& dir);

/// True when `dir` holds what a failed dump leaves once its job was restored in place: CRIU's
/// log, and neither a manifest, a pending manifest nor a state file (the dump removed them).
bool IsFailedDump(const std::string& dir);

/// Why CRIU's images in `dir` are not a complete dump, as a sentence: no inventory.img, or
/// criu-dump.log does not say "Dumping finished successfully". "" when they are complete.
std::string WhyCriuDumpIncomplete(const std::string& dir);

/// The manifest of a dump interrupted after CRIU ran (pending manifest, no manifest): the
/// pending one (which lists the carrier files) with every other image file's size and
/// digests (DescribeImageFiles). Error naming the cause: ENOENT when there is no pending
/// manifest, EIO when CRIU's images are not complete (WhyCriuDumpIncomplete: the job was not
/// taken to disk; the message names the command that brings the job back,
/// CheckpointedInPlaceText's when it is still checkpointed in place), else
/// ReadPendingManifest's or DescribeImageFiles'.
Result<Manifest> CompleteInterruptedDump(const std::string& dir);

/// Every dump file of `dir` (IsDumpFile, regular files only), sorted by name, with its size
/// and chunks: a carrier file's from `carriers` (its shim's digests, taken as they are), every
/// other file digested here in chunks of kImageChunkBytes, every chunk of every file
/// concurrently on up to `threads` threads (0: one per CPU, at most 16). errno-coded Error
/// naming the file that could not be read or changed size while it was read, or a carrier
/// file no shim reported (EINVAL).
Result<std::vector<ImageFile>> DescribeImageFiles(const std::string& dir,
                                                  const std::vector<ImageFile>& carriers = {},
                                                  unsigned threads = 0);

/// DigestFiles' work for the `files` named (names and sizes; chunks filled in), in their
/// order: each file in chunks of kImageChunkBytes.
Result<std::vector<ImageFile>> DigestFiles(const std::string& dir, std::vector<ImageFile> files,
                                           unsigned threads = 0);

/// Every file of `dir` a dump lists (IsDumpFile), with its size (no chunks), sorted by name.
/// errno-coded Error when `dir` cannot be listed.
Result<std::vector<ImageFile>> ListImageFiles(const std::string& dir);

/// Sum of ListImageFiles' sizes (0 when the directory cannot be listed): what CRIU wrote.
uint64_t ImageBytes(const std::string& dir);

/// Which files a check of the images reads.
enum class ReadScope {
  /// Every file but the carriers' chunks (their shims check those as they read them back).
  kAllButCarrierChunks,
  /// Every byte, the carriers' chunks too: a check before CRIU for a restore cusnap does not
  /// drive (the CRIU plugin's).
  kEveryByte,
  /// kAllButCarrierChunks less CRIU's page images (IsCriuPageImage): the check before
  /// `criu restore`, whose page images are read beside it (kCriuPages).
  kBeforeCriu,
  /// CRIU's page images alone, their sizes and bytes (whether the directory holds a file the
  /// manifest does not list was asked before CRIU ran, by kBeforeCriu).
  kCriuPages,
};

/// What is wrong with the image files of `dir` against the manifest's list, one sentence
/// each naming the file: a file missing or of another size (truncated or grown), a dump
/// file the manifest does not list (an extra file), a chunk whose bytes do not match its
/// digest (the first failing chunk of each file, by offset), bytes no chunk covers that are
/// not zeros. The files `scope` names are read (concurrently, `threads` as
/// DescribeImageFiles); of a carrier, unless kEveryByte, only what no chunk covers, and only
/// where the file holds data there (SEEK_DATA). CRIU's statistics (stats-dump) are no extra
/// file: CRIU writes them after its plugins' last hook of a dump, so a manifest written there
/// lacks them.
std::vector<std::string> CheckImageFiles(const std::string& dir, const Manifest& manifest,
                                         unsigned threads = 0,
                                         ReadScope scope = ReadScope::kAllButCarrierChunks);

/// What the machine offers a restore.
struct MachineView {
  std::string driver;             ///< CheckpointDriver::Describe()
  std::vector<std::string> uuids; ///< index = ordinal
  std::vector<std::string> models;///< index = ordinal; may be empty (not known)
};

/// Whether the process `pid` that started at `start_time` still exists.
using AliveCheck = std::function<bool(int pid, uint64_t start_time)>;

/// Every process and thread id the dump in `dir` gives back: its participants' pids and
/// every id CRIU named a thread image by (core-<tid>.img; a process's main thread has its pid).
std::vector<int> DumpedIds(const std::string& dir, const Manifest& manifest);

/// An id of the dump (DumpedIds) that a process or thread here holds now.
struct TakenId {
  int id = 0;
  bool participant = false;  ///< a participant's pid (else another process's or a thread's id)
};

/// The ids of the dump in `dir` that others hold now: a participant's pid held by a process
/// that is not it (alive() says no for its recorded start time), and any other id of the dump
/// that exists here. CRIU gives every process and thread its id back ("Unable to create a
/// thread: -17" otherwise), so none of them can be restored in this PID namespace.
std::vector<TakenId> DumpIdsTaken(const std::string& dir, const Manifest& manifest,
                                  const AliveCheck& alive);

/// Where the dumped process `pid` that started at `start_time` runs now: the pid here of
/// that process itself or of a copy a restore made of it; 0 when none runs.
using RunningCheck = std::function<int(int pid, uint64_t start_time)>;

/// The RunningCheck of this machine: the process itself, in this PID namespace (AliveHere)
/// or one below (`pid` there, the same start time), else a restored copy of it in any PID
/// namespace whose start-time alias lies under `control_dir`
/// (RunningRestoredCopy: so that a second `restore --images-dir` of a job restored in a PID
/// namespace of its own does not make a second copy).
RunningCheck RunningHere(const std::string& control_dir);

/// A process of the dumped job, or of a copy of it, that runs: the pid here (`running`) of
/// its root, else of the first participant that runs; 0 when none does (a job whose root
/// was killed but whose child runs on still runs: restoring it would copy the child).
int DumpedJobRunning(const Manifest& manifest, const RunningCheck& running);

/// Whether the dumped job still runs (DumpedJobRunning is not 0).
bool DumpedJobRuns(const Manifest& manifest, const RunningCheck& running);

// AliveHere (coordinator/proc/processes.h) is the AliveCheck of this machine.

/// Why a restore run with control directory `control_dir` cannot bring back the job of
/// `manifest`: the restored shims keep the control directory they had (their environment
/// comes back as dumped), the manifest's or a job control directory below it
/// (IsJobControlDir), and hold markers there would stop them again; "" when it is that one
/// (compared as absolute, normalized paths) or the manifest records none.
std::string OtherControlDirProblem(const Manifest& manifest, const std::string& control_dir);

/// Everything that makes a restore from `dir` impossible, each as one sentence naming its
/// cause, checked before anything changes: the manifest missing or unreadable; the image
/// files (CheckImageFiles); another driver; fewer
/// GPUs than the job used, or a job GPU the machine does not have (without a `device_map`);
/// a device map that is incomplete, names unknown GPUs or puts two on one
/// (ResolveDeviceMap); a target GPU of another model than the one it replaces; the dumped
/// job, or a restored copy of it, still running (DumpedJobRunning: restoring would make a
/// second copy of it); a pid of the dump that another process holds now (CRIU gives
/// every process its pid back and fails with "File exists" otherwise); with `resumed`, the
/// last two are not asked (the tree an interrupted restore brought back holds the ids, and
/// is the job). `pairs` receives the resolved device map; `scope` as for CheckImageFiles.
/// Empty: fine.
std::vector<std::string> CheckImages(const std::string& dir, const Manifest& manifest,
                                     const MachineView& machine,
                                     const std::vector<DevicePair>& device_map,
                                     const RunningCheck& running, std::vector<UuidPair>& pairs,
                                     bool resumed = false,
                                     ReadScope scope = ReadScope::kAllButCarrierChunks);

}  // namespace cusnap::coord
