// The images manifest: JSON, file checksums, and the restore's checks (images.h).
#include "coordinator/images/manifest.h"


#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "common/ids.h"
#include "common/unique_fd.h"
#include "coordinator/images/carrier_files.h"
#include "coordinator/images/criu.h"
#include "coordinator/record/json_number.h"
#include "coordinator/proc/processes.h"
#include "coordinator/images/restored_aliases.h"
#include "coordinator/record/sha256.h"
#include "coordinator/record/state_file.h"

namespace cusnap::coord {
namespace {

nlohmann::json GpuToJson(const ImagesGpu& g) {
  return {{"ordinal", g.ordinal}, {"uuid", g.uuid}, {"model", g.model}};
}

/// "GPU-<uuid> (<model>)", or the UUID alone when the model is not known.
std::string GpuText(const std::string& uuid, const std::string& model) {
  return model.empty() ? uuid : uuid + " (" + model + ")";
}

}  // namespace

uint64_t Manifest::TotalBytes() const {
  uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  return total;
}

uint64_t Manifest::CriuBytes() const {
  uint64_t total = 0;
  for (const auto& f : files) total += IsCarrierFile(f.name) ? 0 : f.bytes;
  return total;
}

nlohmann::json ManifestToJson(const Manifest& m) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : m.gpus) gpus.push_back(GpuToJson(g));
  nlohmann::json participants = nlohmann::json::array();
  for (const auto& p : m.participants) {
    participants.push_back({{"pid", p.pid}, {"start_time", p.start_time},
                            {"saved_bytes", p.saved_bytes}, {"gpus", p.gpus}});
  }
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  }
  nlohmann::json document = {
          {"format_version", m.format_version}, {"cusnap_version", m.cusnap_version},
          {"driver", m.driver},                 {"criu_version", m.criu_version},
          {"created_unix_s", m.created_unix_s}, {"checkpoint_id", m.checkpoint_id},
          {"root_pid", m.root_pid},             {"root_start_time", m.root_start_time},
          {"left_running", m.left_running},     {"own_pid_namespace", m.own_pid_namespace},
          {"control_dir", m.control_dir},
          {"gpus", gpus},
          {"participants", participants},       {"files", files},
          {"image_bytes", m.TotalBytes()}};
  // The manifest is checked like the files it lists: a change to it (a GPU, the driver, a
  // checksum) is found before it decides anything.
  document["digest"] = DocumentDigest(document);
  return document;
}

Result<Manifest> ManifestFromJson(const nlohmann::json& json, const std::string& origin) {
  try {
    Manifest m;
    m.format_version = IntegerField<int>(json, "format_version");
    // Format 1 differs only in how large files are checksummed (HashImageFiles reads both).
    if (m.format_version != kManifestFormatVersion && m.format_version != 1) {
      return Error{-1, origin + ": manifest format version " + std::to_string(m.format_version) +
                           ", this cusnap reads versions 1 to " +
                           std::to_string(kManifestFormatVersion)};
    }
    m.cusnap_version = json.at("cusnap_version").get<std::string>();
    m.driver = json.at("driver").get<std::string>();
    m.criu_version = json.at("criu_version").get<std::string>();
    m.created_unix_s = IntegerField<int64_t>(json, "created_unix_s");
    m.checkpoint_id = json.at("checkpoint_id").get<std::string>();
    m.root_pid = IntegerField<int>(json, "root_pid", 0, kMaxPid);
    m.root_start_time = IntegerField<uint64_t>(json, "root_start_time");
    m.left_running = json.at("left_running").get<bool>();
    m.own_pid_namespace = json.value("own_pid_namespace", false);
    m.control_dir = json.value("control_dir", "");
    for (const auto& g : json.at("gpus")) {
      m.gpus.push_back(ImagesGpu{IntegerField<int>(g, "ordinal", 0, kMaxDevices),
                                 g.at("uuid").get<std::string>(), g.at("model").get<std::string>()});
    }
    for (const auto& p : json.at("participants")) {
      m.participants.push_back(ImagesParticipant{
          IntegerField<int>(p, "pid", 1, kMaxPid), IntegerField<uint64_t>(p, "start_time"),
          IntegerField<uint64_t>(p, "saved_bytes"), p.at("gpus").get<std::vector<std::string>>()});
    }
    for (const auto& f : json.at("files")) {
      ImageFile file{f.at("name").get<std::string>(), IntegerField<uint64_t>(f, "bytes"),
                     f.at("sha256").get<std::string>()};
      if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "..") {
        return Error{-1, origin + ": manifest names a file outside the images directory: '" +
                             file.name + "'"};
      }
      m.files.push_back(std::move(file));
    }
    // Manifests written before it have none (and are read as they are).
    if (json.contains("digest") && json.at("digest").get<std::string>() != DocumentDigest(json)) {
      return Error{-1, origin + ": the manifest was changed after the dump wrote it (its digest "
                                "does not match its content), so it no longer describes the "
                                "images; restore from an unchanged copy"};
    }
    return m;
  } catch (const std::exception& e) {
    return Error{-1, origin + ": corrupt manifest: " + e.what()};
  }
}

Status WriteManifest(const std::string& dir, const Manifest& manifest) {
  return WriteFileDurably(dir, kManifestFileName, ManifestToJson(manifest).dump(2) + "\n");
}

Status WritePendingManifest(const std::string& dir, const Manifest& manifest) {
  return WriteFileDurably(dir, kPendingManifestFileName, ManifestToJson(manifest).dump(2) + "\n");
}

Status RemovePendingManifest(const std::string& dir) {
  return RemoveFileDurably(dir, kPendingManifestFileName);
}

bool HasManifest(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir + "/" + kManifestFileName, ec);
}

bool HasPendingManifest(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir + "/" + kPendingManifestFileName, ec);
}

namespace {

/// Reads the manifest document <dir>/<name>; ENOENT with `missing` when it is not there.
Result<Manifest> ReadManifestFile(const std::string& dir, const char* name,
                                  const std::string& missing) {
  const std::string path = dir + "/" + name;
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return Error{ENOENT, missing + " (" + path + " is missing)"};
    return Error{err, "cannot read " + path + ": " + std::strerror(err)};
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return Error{-1, path + ": corrupt manifest (not valid JSON)"};
  return ManifestFromJson(json, path);
}

}  // namespace

bool IsCriuOutput(const std::string& name) {
  return name.ends_with(".img") || name == "stats-dump" || name == "stats-restore" ||
         name == "restored.pid";
}

bool IsDumpFile(const std::string& name) {
  if (name == "stats-restore" || name == "restored.pid") return false;  // a restore's
  return IsCriuOutput(name) || IsCarrierFile(name) || name == kStateFileName;
}

Status RemovePreviousDump(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsCriuOutput(name) && name != kManifestFileName) continue;
    std::error_code rm;
    if (!std::filesystem::remove(e.path(), rm) && rm) {
      return Error{rm.value(), "cannot remove " + e.path().string() + " of an earlier dump: " +
                                   rm.message()};
    }
  }
  return Ok{};
}

std::string CheckpointedInPlaceText(const std::string& dir) {
  // A pending manifest is written before CRIU runs: with CRIU's images incomplete, the job
  // was not taken to disk, and is still checkpointed in place when its processes run (the
  // README promised this text there, and the restore said only 'cusnap recover').
  if (HasManifest(dir) || (HasPendingManifest(dir) && WhyCriuDumpIncomplete(dir).empty())) return "";
  auto state = ReadStateFile(dir);
  if (!state || state->participants.empty()) return "";
  std::string pids;
  for (const auto& p : state->participants) {
    if (!AliveHere(p.pid, p.start_time)) return "";
    pids += (pids.empty() ? "" : ", ") + std::to_string(p.pid);
  }
  const std::string first = std::to_string(state->participants.front().pid);
  return dir + " holds the state file of a checkpoint whose processes still run here (pid " +
         pids + "): a dump stopped after its checkpoint, before CRIU ran; 'cusnap restore "
         "--pid " + first + " --state-dir " + dir + "' resumes the job in place";
}

bool IsFailedDump(const std::string& dir) {
  auto exists = [&](const std::string& name) { return ::access((dir + "/" + name).c_str(), F_OK) == 0; };
  return (exists(kCriuDumpLogName) || exists(kCriuOutputLogName)) && !exists(kManifestFileName) &&
         !exists(kPendingManifestFileName) && ::access(StateFilePath(dir).c_str(), F_OK) != 0;
}

Result<Manifest> ReadManifest(const std::string& dir) {
  if (IsFailedDump(dir)) {
    const bool logged = ::access((dir + "/" + kCriuDumpLogName).c_str(), F_OK) == 0;
    return Error{ENOENT, "no images in " + dir + ": a dump failed there and its job was restored "
                         "in place (CRIU's log: " + dir + "/" +
                         (logged ? kCriuDumpLogName : kCriuOutputLogName) + ")"};
  }
  return ReadManifestFile(dir, kManifestFileName, "no images in " + dir);
}

Result<Manifest> ReadPendingManifest(const std::string& dir) {
  return ReadManifestFile(dir, kPendingManifestFileName, "no interrupted dump in " + dir);
}

std::string WhyCriuDumpIncomplete(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir + "/inventory.img", ec)) {
    return "CRIU did not finish the dump: " + dir + "/inventory.img, which it writes last, is "
           "missing";
  }
  std::ifstream log(dir + "/" + kCriuDumpLogName);
  for (std::string line; std::getline(log, line);) {
    if (line.find(kCriuDumpFinished) != std::string::npos) return "";
  }
  return std::string("CRIU did not finish the dump: ") + dir + "/" + kCriuDumpLogName +
         " does not say '" + kCriuDumpFinished + "'";
}

Result<Manifest> CompleteInterruptedDump(const std::string& dir) {
  auto pending = ReadPendingManifest(dir);
  if (!pending) return pending.error();
  if (std::string why = WhyCriuDumpIncomplete(dir); !why.empty()) {
    const std::string in_place = CheckpointedInPlaceText(dir);
    return Error{EIO, dir + " holds a dump that was interrupted before it was complete (" + why +
                          "): the job was not taken to disk; " +
                          (in_place.empty() ? "if its processes still run, 'cusnap status' names "
                                              "their state and 'cusnap recover' brings them back"
                                            : in_place)};
  }
  auto files = HashImageFiles(dir, pending->format_version);
  if (!files) return files.error();
  pending->files = std::move(*files);
  return std::move(*pending);
}

namespace {

/// The SHA-256 digest (raw bytes) of `length` bytes of `path` from `offset`; to the end of
/// the file when `to_end`. An error when the file is shorter than that (it changed).
Result<std::string> Sha256OfPiece(const std::string& path, uint64_t offset, uint64_t length,
                                  bool to_end) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    const int err = errno;
    return Error{err, "cannot open " + path + ": " + std::strerror(err)};
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return Error{-1, "SHA-256 is not available (OpenSSL)"};
  }
  std::vector<unsigned char> buffer(size_t{4} << 20);
  uint64_t done = 0;
  while (to_end || done < length) {
    const size_t want = to_end ? buffer.size()
                               : static_cast<size_t>(std::min<uint64_t>(buffer.size(), length - done));
    const ssize_t n = ::pread(fd.get(), buffer.data(), want, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return Error{err, "cannot read " + path + ": " + std::strerror(err)};
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
  }
  if (!to_end && done < length) {
    return Error{EIO, path + " is shorter than its " + std::to_string(offset + length) +
                          " bytes: it changed while it was checksummed"};
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned size = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &size);
  return std::string(reinterpret_cast<const char*>(digest), size);
}

/// How many pieces ImageChecksum hashes a `bytes`-byte file in (1: the whole file at once).
uint64_t PieceCount(uint64_t bytes, int format) {
  if (format < 2 || bytes <= kChecksumPieceBytes) return 1;
  return (bytes + kChecksumPieceBytes - 1) / kChecksumPieceBytes;
}

/// The digest of piece `k` of a file of `bytes` bytes hashed in `pieces` pieces.
Result<std::string> PieceDigest(const std::string& path, uint64_t bytes, uint64_t pieces,
                                uint64_t k) {
  if (pieces == 1) return Sha256OfPiece(path, 0, 0, /*to_end=*/true);
  const uint64_t offset = k * kChecksumPieceBytes;
  return Sha256OfPiece(path, offset, std::min(kChecksumPieceBytes, bytes - offset), false);
}

/// The checksum of a file from its pieces' digests (ImageChecksum).
std::string CombinedChecksum(const std::vector<std::string>& digests) {
  if (digests.size() == 1) {
    return HexBytes(reinterpret_cast<const unsigned char*>(digests[0].data()),
                    static_cast<unsigned>(digests[0].size()));
  }
  std::string joined;
  for (const auto& d : digests) joined += d;
  return Sha256Hex(joined);
}

}  // namespace

Result<std::string> ImageChecksum(const std::string& path, uint64_t bytes, int format) {
  const uint64_t pieces = PieceCount(bytes, format);
  std::vector<std::string> digests;
  for (uint64_t k = 0; k < pieces; ++k) {
    auto d = PieceDigest(path, bytes, pieces, k);
    if (!d) return d.error();
    digests.push_back(std::move(*d));
  }
  return CombinedChecksum(digests);
}

Result<std::vector<ImageFile>> ListImageFiles(const std::string& dir) {
  std::vector<ImageFile> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || !IsDumpFile(name)) continue;
    files.push_back(ImageFile{name, static_cast<uint64_t>(entry.file_size(ec)), ""});
  }
  if (ec) return Error{ec.value(), "cannot list " + dir + ": " + ec.message()};
  std::sort(files.begin(), files.end(),
            [](const ImageFile& a, const ImageFile& b) { return a.name < b.name; });
  return files;
}

uint64_t ImageBytes(const std::string& dir) {
  auto files = ListImageFiles(dir);
  uint64_t total = 0;
  if (files) {
    for (const auto& f : *files) total += f.bytes;
  }
  return total;
}

Result<std::vector<ImageFile>> HashImageFiles(const std::string& dir, int format,
                                              unsigned threads) {
  auto listed = ListImageFiles(dir);
  if (!listed) return listed.error();
  return HashFiles(dir, std::move(*listed), format, threads);
}

Result<std::vector<ImageFile>> HashFiles(const std::string& dir, std::vector<ImageFile> files,
                                         int format, unsigned threads) {
  // Every piece of every file is one task; larger files first, so that the last task to
  // start is a small one.
  struct Task {
    size_t file;
    uint64_t piece;
  };
  std::vector<std::vector<std::string>> digests(files.size());
  std::vector<Task> tasks;
  for (size_t i = 0; i < files.size(); ++i) {
    const uint64_t pieces = PieceCount(files[i].bytes, format);
    digests[i].resize(pieces);
    for (uint64_t k = 0; k < pieces; ++k) tasks.push_back({i, k});
  }
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return files[a.file].bytes > files[b.file].bytes;
  });
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(tasks.size(), 1)));
  std::atomic<size_t> next{0};
  std::vector<std::string> errors(tasks.size());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < tasks.size();) {
        const Task& task = tasks[k];
        const ImageFile& f = files[task.file];
        auto d = PieceDigest(dir + "/" + f.name, f.bytes, digests[task.file].size(), task.piece);
        if (d) digests[task.file][task.piece] = std::move(*d); else errors[k] = d.error().message;
      }
    });
  }
  for (auto& t : pool) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) return Error{-1, e};
  }
  for (size_t i = 0; i < files.size(); ++i) files[i].sha256 = CombinedChecksum(digests[i]);
  return files;
}

std::vector<int> DumpedIds(const std::string& dir, const Manifest& manifest) {
  std::vector<int> ids;
  for (const auto& p : manifest.participants) ids.push_back(p.pid);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view kPrefix = "core-", kSuffix = ".img";
    if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
        !name.ends_with(kSuffix)) {
      continue;
    }
    const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int id = std::stoi(digits);
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::vector<TakenId> DumpIdsTaken(const std::string& dir, const Manifest& manifest,
                                  const AliveCheck& alive) {
  std::vector<TakenId> taken;
  for (const int id : DumpedIds(dir, manifest)) {
    if (KernelStartTime(id) == 0) continue;  // free (a thread's /proc entry reads like a process's)
    const auto p = std::find_if(manifest.participants.begin(), manifest.participants.end(),
                                [&](const auto& q) { return q.pid == id; });
    if (p == manifest.participants.end()) {
      taken.push_back({id, false});
    } else if (!alive(p->pid, p->start_time)) {
      taken.push_back({id, true});
    }
  }
  return taken;
}

RunningCheck RunningHere(const std::string& control_dir) {
  return [control_dir](int pid, uint64_t start_time) {
    // A dumped pid is the process's innermost one (a job in a PID namespace of its own has
    // its own numbers), and start times are ticks since boot everywhere: that namespace's
    // init can be `pid` here, started in the same tick as the job's process `pid` there.
    if (AliveHere(pid, start_time)) {
      const std::vector<int> ns = NamespacePids(pid);
      if (!ns.empty() && ns.back() == pid) return pid;
    }
    if (const int here = FindByInnermostPid(pid, [&](uint64_t t) { return t == start_time; })) {
      return here;
    }
    return RunningRestoredCopy(control_dir, pid, start_time);
  };
}

int DumpedJobRunning(const Manifest& manifest, const RunningCheck& running) {
  if (manifest.root_pid > 0) {
    if (const int here = running(manifest.root_pid, manifest.root_start_time)) return here;
  }
  for (const auto& p : manifest.participants) {
    if (p.pid <= 0) continue;
    if (const int here = running(p.pid, p.start_time)) return here;
  }
  return 0;
}

bool DumpedJobRuns(const Manifest& manifest, const RunningCheck& running) {
  return DumpedJobRunning(manifest, running) != 0;
}

std::vector<std::string> CheckImages(const std::string& dir, const Manifest& manifest,
                                     const MachineView& machine,
                                     const std::vector<DevicePair>& device_map,
                                     const RunningCheck& running, std::vector<UuidPair>& pairs,
                                     bool resumed) {
  std::vector<std::string> problems;
  if (manifest.driver != machine.driver) {
    problems.push_back(dir + " was dumped under driver '" + manifest.driver +
                       "', this machine has '" + machine.driver +
                       "': a native checkpoint restores only on the driver that wrote it");
  }
  // CRIU binds every endpoint socket of the job there again ("Can't bind ... No such file or
  // directory" otherwise, when the control directory was removed since the dump).
  if (std::error_code ec; !manifest.control_dir.empty() &&
                          !std::filesystem::is_directory(manifest.control_dir, ec)) {
    // mkdir -p would make missing parents 0755, which cusnap refuses as unsafe: each missing
    // directory is named, parents first, for one mkdir -m 700.
    std::vector<std::string> gone;  // innermost first
    for (std::filesystem::path d = manifest.control_dir;
         !d.empty() && d != d.root_path() && !std::filesystem::exists(d, ec); d = d.parent_path()) {
      gone.push_back(d.string());
    }
    std::string missing;
    for (auto d = gone.rbegin(); d != gone.rend(); ++d) {
      missing += ' ';
      missing += *d;
    }
    problems.push_back("the job's control directory " + manifest.control_dir + " does not "
                       "exist: CRIU binds the job's endpoint sockets there again; create it "
                       "(mkdir -m 700" + missing + ")");
  }
  const int runs_as = resumed ? 0 : DumpedJobRunning(manifest, running);
  const bool runs = runs_as != 0;
  if (runs) {
    problems.push_back(dir + " holds a dump of a job that is still running (pid " +
                       std::to_string(runs_as) + (manifest.left_running
                                                                ? ", dumped with --leave-running"
                                                                : "") +
                       "): restoring it would make a second copy; stop that job first");
  }
  // The job's own processes hold its ids while it runs: said above, not as others' ids.
  const AliveCheck itself = [&](int pid, uint64_t start_time) { return running(pid, start_time) == pid; };
  // A tree whose root was its PID namespace's init (a container's) comes back in a PID
  // namespace CRIU makes anew, where every id of the dump is free.
  const bool new_pid_namespace = manifest.own_pid_namespace && manifest.root_pid == 1;
  for (const TakenId& t : runs || resumed || new_pid_namespace
                              ? std::vector<TakenId>{}
                              : DumpIdsTaken(dir, manifest, itself)) {
    problems.push_back((t.participant ? "pid " : "process or thread id ") +
                       std::to_string(t.id) + " of the dump is held by another " +
                       "process now; CRIU gives every process and thread its id back, so it "
                       "must be free (end that process, or restore with --pid-namespace)");
  }
  // The GPUs the job used, in the order the manifest lists them.
  std::set<std::string> used_set;
  std::vector<std::string> used;
  for (const auto& p : manifest.participants) {
    for (const auto& g : p.gpus) {
      if (used_set.insert(g).second) used.push_back(g);
    }
  }
  std::map<std::string, std::string> recorded_model;
  for (const auto& g : manifest.gpus) recorded_model[g.uuid] = g.model;
  if (used.size() > machine.uuids.size()) {
    problems.push_back("the dumped job used " + std::to_string(used.size()) + " GPU" +
                       (used.size() == 1 ? "" : "s") + ", this machine has " +
                       std::to_string(machine.uuids.size()));
  } else if (device_map.empty()) {
    for (const auto& uuid : used) {
      if (std::find(machine.uuids.begin(), machine.uuids.end(), uuid) == machine.uuids.end()) {
        problems.push_back("the dumped job used GPU " + GpuText(uuid, recorded_model[uuid]) +
                           ", which this machine does not have; say where it goes with "
                           "--device-map (e.g. " + uuid + "=0)");
      }
    }
  } else if (auto resolved = ResolveDeviceMap(device_map, machine.uuids, used); !resolved) {
    problems.push_back(resolved.error().message);
  } else {
    pairs = *resolved;
  }
  // The model of each GPU the job lands on must be the one it left.
  if (problems.empty() && !machine.models.empty()) {
    for (const auto& uuid : used) {
      std::string onto = uuid;
      for (const auto& p : pairs) {
        if (p.from == uuid) onto = p.to;
      }
      const auto at = std::find(machine.uuids.begin(), machine.uuids.end(), onto);
      const size_t ordinal = static_cast<size_t>(at - machine.uuids.begin());
      const std::string& model = ordinal < machine.models.size() ? machine.models[ordinal] : "";
      if (!recorded_model[uuid].empty() && model != recorded_model[uuid]) {
        problems.push_back("the dumped job used GPU " + GpuText(uuid, recorded_model[uuid]) +
                           "; it would be restored onto " + GpuText(onto, model) +
                           ", another model");
      }
    }
  }
  // The files the manifest lists, and only those: others in the directory are the user's
  // (IsDumpFile), and a manifest written before that rule may list one of them.
  std::vector<ImageFile> present;
  std::vector<const ImageFile*> listed;  // present[k] is listed[k] in the manifest
  for (const auto& f : manifest.files) {
    const std::string path = dir + "/" + f.name;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    if (ec) {
      problems.push_back("image file " + path + " is missing");
    } else if (bytes != f.bytes) {
      problems.push_back("image file " + path + " holds " + std::to_string(bytes) +
                         " bytes, the manifest says " + std::to_string(f.bytes) + " (corrupt)");
    } else {
      present.push_back(ImageFile{f.name, f.bytes, ""});
      listed.push_back(&f);
    }
  }
  auto hashed = HashFiles(dir, present, manifest.format_version);
  if (!hashed) {
    problems.push_back(hashed.error().message);
    return problems;
  }
  for (size_t k = 0; k < hashed->size(); ++k) {  // HashFiles keeps the order it was given
    const ImageFile& f = (*hashed)[k];
    if (f.sha256 != listed[k]->sha256) {
      problems.push_back("image file " + dir + "/" + f.name + " is corrupt: its SHA-256 is " +
                         f.sha256 + ", the manifest says " + listed[k]->sha256);
    }
  }
  return problems;
}

}  // namespace cusnap::coord
