// The images manifest: JSON, file checksums, and the restore's checks (images.h).
#include "coordinator/images/manifest.h"


#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/control_dir.h"
#include "common/ids.h"
#include "common/text.h"
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

ImageFile ImageFileOf(const proto::CarrierFile& written) {
  ImageFile file{written.name, written.bytes, {}};
  for (const proto::CarrierChunk& c : written.chunks) {
    file.chunks.push_back({c.offset, c.bytes, ChunkDigest{c.digest_high, c.digest_low}});
  }
  return file;
}

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

uint64_t Manifest::CriuPageBytes() const {
  uint64_t total = 0;
  for (const auto& f : files) total += IsCriuPageImage(f.name) ? f.bytes : 0;
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
    nlohmann::json chunks = nlohmann::json::array();
    for (const auto& c : f.chunks) chunks.push_back({c.offset, c.bytes, DigestHex(c.digest)});
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"chunks", std::move(chunks)}});
  }
  nlohmann::json document = {
          {"format_version", m.format_version}, {"cusnap_version", m.cusnap_version},
          {"chunk_digest", kChunkDigestName},   {"chunk_bytes", m.chunk_bytes},
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
    if (m.format_version != kManifestFormatVersion) {
      const std::string by = json.contains("cusnap_version") && json["cusnap_version"].is_string()
                                 ? " (written by " + json["cusnap_version"].get<std::string>() + ")"
                                 : "";
      return Error{-1, origin + ": images of manifest format version " +
                           std::to_string(m.format_version) + by + "; this cusnap reads format " +
                           std::to_string(kManifestFormatVersion) + " only: restore them with " +
                           (m.format_version < kManifestFormatVersion
                                ? "the cusnap that wrote them"
                                : "a cusnap that reads them (a newer one)") +
                           ", or dump the job again with this one"};
    }
    if (json.at("chunk_digest").get<std::string>() != kChunkDigestName) {
      return Error{-1, origin + ": manifest digests its chunks with " +
                           json.at("chunk_digest").get<std::string>() + ", this cusnap with " +
                           kChunkDigestName};
    }
    m.chunk_bytes = IntegerField<uint64_t>(json, "chunk_bytes", 1);
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
      ImageFile file{f.at("name").get<std::string>(), IntegerField<uint64_t>(f, "bytes"), {}};
      if (file.name.empty() || file.name.find('/') != std::string::npos || file.name == "..") {
        return Error{-1, origin + ": manifest names a file outside the images directory: '" +
                             file.name + "'"};
      }
      uint64_t end = 0;  // chunks in order, apart, inside the file
      for (const auto& c : f.at("chunks")) {
        ImageChunk chunk{c.at(0).get<uint64_t>(), c.at(1).get<uint64_t>(), {}};
        if (!ParseDigestHex(c.at(2).get<std::string>(), chunk.digest) || chunk.bytes == 0 ||
            chunk.offset < end || chunk.bytes > file.bytes || chunk.offset > file.bytes - chunk.bytes) {
          return Error{-1, origin + ": corrupt manifest: a chunk of " + file.name + " (" + c.dump() +
                               ") is not a digest of bytes inside the file, after its others"};
        }
        end = chunk.offset + chunk.bytes;
        file.chunks.push_back(chunk);
      }
      m.files.push_back(std::move(file));
    }
    if (json.at("digest").get<std::string>() != DocumentDigest(json)) {
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
  auto manifest = ManifestFromJson(json, path);
  // Its digest covers its fields; the rest of its text (white space, the last newline) must
  // be as the dump wrote it too, so that any byte changed, cut or added is found.
  if (manifest && text.str() != ManifestToJson(*manifest).dump(2) + "\n") {
    return Error{-1, path + ": corrupt manifest: its text is not the text the dump wrote (a "
                            "byte changed, cut or added between its fields); restore from an "
                            "unchanged copy of the images"};
  }
  return manifest;
}

}  // namespace

bool IsCriuOutput(const std::string& name) {
  return name.ends_with(".img") || name == "stats-dump" || name == "stats-restore" ||
         name == "restored.pid";
}

bool IsCriuPageImage(const std::string& name) {
  // CRIU numbers its page images as it numbers the processes' files: 1 to 9 digits, above 0.
  return name.starts_with("pages-") && PidOfFileName(name.substr(6), ".img").has_value();
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
    pids += (pids.empty() ? "" : ", ") + ProcessText(p.pid);
  }
  return dir + " holds the state file of a checkpoint whose processes still run here (" + pids +
         "): a dump stopped after its checkpoint, before CRIU ran; 'cusnap restore " +
         PidOption(state->participants.front().pid) + " --state-dir " + dir +
         "' resumes the job in place";
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
  auto files = DescribeImageFiles(dir, pending->files);
  if (!files) return files.error();
  pending->files = std::move(*files);
  return std::move(*pending);
}

Result<std::vector<ImageFile>> ListImageFiles(const std::string& dir) {
  std::vector<ImageFile> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || !IsDumpFile(name)) continue;
    files.push_back(ImageFile{name, static_cast<uint64_t>(entry.file_size(ec)), {}});
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

namespace {

/// Runs `work(k)` for every k in [0, count) on up to `threads` threads (0: one per CPU, at
/// most 16): one rank's page image holds most of CRIU's bytes.
void RunConcurrently(size_t count, unsigned threads, const std::function<void(size_t)>& work) {
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(count, 1)));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < count;) work(k);
    });
  }
  for (auto& t : pool) t.join();
}

/// Bytes read at a time while digesting or checking a range.
constexpr size_t kReadBlock = size_t{4} << 20;

/// Reads [offset, offset + bytes) of `path` into `buffer` a block at a time, calling
/// `each(data, n)` for every block read. An errno-coded Error naming the file when it cannot
/// be opened or read, or ends first (it changed).
Status ReadRange(const std::string& path, uint64_t offset, uint64_t bytes,
                 const std::function<void(const unsigned char*, size_t)>& each) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    const int err = errno;
    return Error{err, "cannot open " + path + ": " + std::strerror(err)};
  }
  std::vector<unsigned char> buffer(static_cast<size_t>(std::min<uint64_t>(kReadBlock, bytes)));
  uint64_t done = 0;
  while (done < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buffer.size(), bytes - done));
    const ssize_t n = ::pread(fd.get(), buffer.data(), want, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return Error{err, "cannot read " + path + ": " + std::strerror(err)};
    }
    if (n == 0) {
      return Error{EIO, path + " is shorter than its " + std::to_string(offset + bytes) +
                            " bytes: it changed while it was read"};
    }
    each(buffer.data(), static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
  }
  return Ok{};
}

/// The digest of [offset, offset + bytes) of `path` (ReadRange's errors).
Result<ChunkDigest> DigestRange(const std::string& path, uint64_t offset, uint64_t bytes) {
  ChunkHasher hasher;
  if (Status s = ReadRange(path, offset, bytes, [&](const unsigned char* data, size_t n) {
        hasher.Update(data, n);
      });
      !s) {
    return s.error();
  }
  return hasher.Finish();
}

/// The first byte of [begin, end) of `path` that is not zero, nullopt when all are; only
/// where the file holds data (SEEK_DATA: a hole is zeros without reading it). Errors name the
/// file.
Result<std::optional<uint64_t>> FirstNonZero(const std::string& path, uint64_t begin, uint64_t end) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    const int err = errno;
    return Error{err, "cannot open " + path + ": " + std::strerror(err)};
  }
  for (uint64_t at = begin; at < end;) {
    off_t data = ::lseek(fd.get(), static_cast<off_t>(at), SEEK_DATA);
    if (data < 0 && errno == ENXIO) return std::optional<uint64_t>{};  // holes to the end
    if (data < 0) data = static_cast<off_t>(at);  // no SEEK_DATA here: read it all
    if (static_cast<uint64_t>(data) >= end) return std::optional<uint64_t>{};
    off_t hole = ::lseek(fd.get(), data, SEEK_HOLE);
    const uint64_t stop = hole < 0 ? end : std::min<uint64_t>(end, static_cast<uint64_t>(hole));
    std::optional<uint64_t> found;
    uint64_t seen = static_cast<uint64_t>(data);
    if (Status s = ReadRange(path, seen, stop - seen, [&](const unsigned char* p, size_t n) {
          for (size_t i = 0; i < n && !found; ++i) {
            if (p[i] != 0) found = seen + i;
          }
          seen += n;
        });
        !s) {
      return s.error();
    }
    if (found) return found;
    at = stop;
  }
  return std::optional<uint64_t>{};
}

/// "[a, b)".
std::string RangeText(uint64_t offset, uint64_t bytes) {
  std::string text = "[";
  text += std::to_string(offset);
  text += ", ";
  text += std::to_string(offset + bytes);
  text += ")";
  return text;
}

}  // namespace

Result<std::vector<ImageFile>> DigestFiles(const std::string& dir, std::vector<ImageFile> files,
                                           unsigned threads) {
  // Every chunk of every file is one task; larger files first, so that the last task to
  // start is a small one.
  struct Task {
    size_t file;
    size_t chunk;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < files.size(); ++i) {
    files[i].chunks.clear();
    for (uint64_t at = 0; at < files[i].bytes; at += kImageChunkBytes) {
      tasks.push_back({i, files[i].chunks.size()});
      files[i].chunks.push_back({at, std::min(kImageChunkBytes, files[i].bytes - at), {}});
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return files[a.file].bytes > files[b.file].bytes;
  });
  std::vector<std::string> errors(tasks.size());
  RunConcurrently(tasks.size(), threads, [&](size_t k) {
    ImageChunk& c = files[tasks[k].file].chunks[tasks[k].chunk];
    auto d = DigestRange(dir + "/" + files[tasks[k].file].name, c.offset, c.bytes);
    if (d) c.digest = *d; else errors[k] = d.error().message;
  });
  for (const auto& e : errors) {
    if (!e.empty()) return Error{-1, e};
  }
  return files;
}

Result<std::vector<ImageFile>> DescribeImageFiles(const std::string& dir,
                                                  const std::vector<ImageFile>& carriers,
                                                  unsigned threads) {
  auto listed = ListImageFiles(dir);
  if (!listed) return listed.error();
  std::vector<ImageFile> digested, others;
  for (ImageFile& f : *listed) {
    if (!IsCarrierFile(f.name)) {
      others.push_back(std::move(f));
      continue;
    }
    const auto written = std::find_if(carriers.begin(), carriers.end(),
                                      [&](const ImageFile& c) { return c.name == f.name; });
    if (written == carriers.end() || written->bytes != f.bytes) {
      return Error{EINVAL, "carrier file " + dir + "/" + f.name + " is not one this dump's "
                           "shims wrote (" + (written == carriers.end()
                                                   ? std::string("none reported it")
                                                   : "they wrote " + std::to_string(written->bytes) +
                                                         " bytes, it holds " + std::to_string(f.bytes)) +
                           "): its bytes cannot be vouched for"};
    }
    digested.push_back(*written);
  }
  auto hashed = DigestFiles(dir, std::move(others), threads);
  if (!hashed) return hashed.error();
  for (ImageFile& f : *hashed) digested.push_back(std::move(f));
  std::sort(digested.begin(), digested.end(),
            [](const ImageFile& a, const ImageFile& b) { return a.name < b.name; });
  return digested;
}

namespace {

/// Whether `scope` reads `name` at all: the bytes no chunk covers, at least.
bool ReadsFile(ReadScope scope, const std::string& name) {
  if (scope == ReadScope::kCriuPages) return IsCriuPageImage(name);
  return scope != ReadScope::kBeforeCriu || !IsCriuPageImage(name);
}

/// Whether `scope` reads the chunks of `name` (checking them against their digests).
bool ReadsChunksOf(ReadScope scope, const std::string& name) {
  switch (scope) {
    case ReadScope::kEveryByte: return true;
    case ReadScope::kAllButCarrierChunks: return !IsCarrierFile(name);
    case ReadScope::kBeforeCriu: return !IsCarrierFile(name) && !IsCriuPageImage(name);
    case ReadScope::kCriuPages: return IsCriuPageImage(name);
  }
  return false;
}

/// The files of `present` whose bytes `scope` reads, checked: each chunk against its digest,
/// the bytes no chunk covers against zeros (the first problem of each file, by offset).
std::vector<std::string> CheckFileBytes(const std::string& dir,
                                        const std::vector<const ImageFile*>& present,
                                        unsigned threads, ReadScope scope) {
  struct Task {
    const ImageFile* file;
    const ImageChunk* chunk;  // null: the file's uncovered ranges
  };
  std::vector<Task> tasks;
  for (const ImageFile* f : present) {
    if (!ReadsFile(scope, f->name)) continue;
    tasks.push_back({f, nullptr});
    if (!ReadsChunksOf(scope, f->name)) continue;
    for (const auto& c : f->chunks) tasks.push_back({f, &c});
  }
  std::mutex mutex;
  std::map<std::string, std::pair<uint64_t, std::string>> first;  // file -> (offset, problem)
  const auto found = [&](const ImageFile& f, uint64_t offset, std::string problem) {
    std::lock_guard lock(mutex);
    auto [at, fresh] = first.try_emplace(f.name, offset, problem);
    if (!fresh && offset < at->second.first) at->second = {offset, std::move(problem)};
  };
  RunConcurrently(tasks.size(), threads, [&](size_t k) {
    const ImageFile& f = *tasks[k].file;
    const std::string path = dir + "/" + f.name;
    if (const ImageChunk* c = tasks[k].chunk) {
      auto d = DigestRange(path, c->offset, c->bytes);
      if (!d) return found(f, c->offset, d.error().message);
      if (*d != c->digest) {
        found(f, c->offset, "image file " + path + " is corrupt: its bytes " +
                                RangeText(c->offset, c->bytes) + " do not match their digest in "
                                "the manifest (the first failing chunk is at offset " +
                                std::to_string(c->offset) + ")");
      }
      return;
    }
    uint64_t at = 0;
    for (size_t i = 0; i <= f.chunks.size(); ++i) {
      const uint64_t end = i < f.chunks.size() ? f.chunks[i].offset : f.bytes;
      if (at < end) {
        auto nonzero = FirstNonZero(path, at, end);
        if (!nonzero) return found(f, at, nonzero.error().message);
        if (*nonzero) {
          return found(f, **nonzero, "image file " + path + " is corrupt: byte " +
                                         std::to_string(**nonzero) + " is not zero, where the "
                                         "dump left zeros (a hole)");
        }
      }
      if (i < f.chunks.size()) at = f.chunks[i].offset + f.chunks[i].bytes;
    }
  });
  std::vector<std::string> problems;
  for (auto& [name, problem] : first) problems.push_back(std::move(problem.second));
  return problems;
}

}  // namespace

std::vector<std::string> CheckImageFiles(const std::string& dir, const Manifest& manifest,
                                         unsigned threads, ReadScope scope) {
  const bool pages_only = scope == ReadScope::kCriuPages;
  std::vector<std::string> problems;
  // The files the manifest lists (of the page images alone: their own), each of its size.
  std::vector<const ImageFile*> present;
  std::set<std::string> names;
  for (const auto& f : manifest.files) {
    names.insert(f.name);
    if (pages_only && !IsCriuPageImage(f.name)) continue;
    const std::string path = dir + "/" + f.name;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(path, ec);
    if (ec) {
      problems.push_back("image file " + path + " is missing");
    } else if (bytes != f.bytes) {
      problems.push_back("image file " + path + " holds " + std::to_string(bytes) +
                         " bytes, the manifest says " + std::to_string(f.bytes) +
                         (bytes < f.bytes ? " (truncated)" : " (corrupt)"));
    } else {
      present.push_back(&f);
    }
  }
  // A dump file it does not list (of another dump, or added since) would be restored with
  // the job (CRIU reads every image it finds that the others name).
  if (pages_only) {
    // Looked for before CRIU ran (kBeforeCriu).
  } else if (auto listed = ListImageFiles(dir); listed) {
    for (const auto& f : *listed) {
      if (!names.count(f.name) && f.name != "stats-dump") {
        problems.push_back("image file " + dir + "/" + f.name + " is not one the manifest lists "
                           "(a file of another dump, or one added since): remove it, or "
                           "restore from an unchanged copy of the images");
      }
    }
  } else {
    problems.push_back(listed.error().message);
  }
  for (auto& problem : CheckFileBytes(dir, present, threads, scope)) {
    problems.push_back(std::move(problem));
  }
  return problems;
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

std::string OtherControlDirProblem(const Manifest& manifest, const std::string& control_dir) {
  if (manifest.control_dir.empty()) return "";
  const auto normal = [](const std::string& path) {
    const std::filesystem::path n = AbsoluteDir(path);
    return (n.has_filename() || n == n.root_path() ? n : n.parent_path()).string();  // "/a/" is "/a"
  };
  const std::string job = normal(manifest.control_dir), mine = normal(control_dir);
  if (job == mine || IsJobControlDir(mine, job)) return "";
  return "the job's endpoints and hold markers are in control directory " + job +
         " (its CUSNAP_CONTROL_DIR when it was dumped), this restore's is " + mine +
         ": run the restore with CUSNAP_CONTROL_DIR=" + job;
}

std::vector<std::string> CheckImages(const std::string& dir, const Manifest& manifest,
                                     const MachineView& machine,
                                     const std::vector<DevicePair>& device_map,
                                     const RunningCheck& running, std::vector<UuidPair>& pairs,
                                     bool resumed, ReadScope scope) {
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
  for (auto& problem : CheckImageFiles(dir, manifest, 0, scope)) {
    problems.push_back(std::move(problem));
  }
  return problems;
}

}  // namespace cusnap::coord
