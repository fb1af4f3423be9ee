// Reading and atomically writing the state file (state_file.h).
#include "coordinator/record/state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>

#include "common/text.h"
#include "common/unique_fd.h"
#include "coordinator/record/json_number.h"
#include "coordinator/record/records.h"
#include "coordinator/record/sha256.h"
#include "coordinator/record/state_guard.h"

namespace cusnap::coord {
namespace {

Error SysError(const std::string& what, const std::string& path) {
  const int err = errno;
  return Error{err, what + " " + path + ": " + std::strerror(err)};
}

/// Writes all of `data` to `fd`, retrying short writes and EINTR.
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

Status FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SysError("cannot open", path);
  const int rc = ::fsync(fd);
  const Error error = rc == 0 ? Error{} : SysError("cannot fsync", path);
  ::close(fd);
  if (rc != 0) return error;
  return Ok{};
}

/// Creates a unique temporary file next to the state file; returns its descriptor and path.
Result<std::pair<int, std::string>> MakeTemp(const std::string& state_dir,
                                             const std::string& name = kStateFileName) {
  std::string templ = state_dir + "/." + name + ".tmp.XXXXXX";
  const int fd = ::mkostemp(templ.data(), O_CLOEXEC);
  if (fd < 0) return SysError("cannot create a file in", state_dir);
  return std::make_pair(fd, templ);
}

}  // namespace

std::string NewCheckpointId() {
  std::random_device random;
  const uint64_t bits = (uint64_t{random()} << 32) | random();
  char text[48];
  std::snprintf(text, sizeof text, "%" PRIx64 "-%016" PRIx64,
                static_cast<uint64_t>(std::time(nullptr)), bits);
  return text;
}

std::string StateFilePath(const std::string& state_dir) {
  return state_dir + "/" + kStateFileName;
}

nlohmann::json StateToJson(const StateFile& state) {
  nlohmann::json participants = nlohmann::json::array();
  for (const auto& p : state.participants) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& r : p.records) records.push_back(RecordToJson(r));
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& g : p.gpus) gpus.push_back({{"ordinal", g.ordinal}, {"uuid", g.uuid}});
    participants.push_back({{"pid", p.pid},
                            {"start_time", p.start_time},
                            {"gpus", gpus},
                            {"saved_bytes", p.saved_bytes},
                            {"records", records}});
  }
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& ph : state.phases) {
    phases.push_back({{"name", ph.name}, {"elapsed_ms", ph.elapsed_ms}, {"bytes", ph.bytes}});
  }
  nlohmann::json document = {{"format", "cusnap-state"},
                             {"format_version", state.format_version},
                             {"driver", state.driver},
                             {"created_unix_s", state.created_unix_s},
                             {"checkpoint_id", state.checkpoint_id},
                             {"participants", participants},
                             {"phases", phases}};
  document["digest"] = DocumentDigest(document);
  return document;
}

std::string DocumentDigest(const nlohmann::json& document) {
  nlohmann::json body = document;
  if (body.is_object()) body.erase("digest");
  return "sha256:" + Sha256Hex(body.dump());
}

Result<StateFile> StateFromJson(const nlohmann::json& json, const std::string& origin) {
  StateFile state;
  std::string where = "document";
  try {
    if (!json.is_object() || json.value("format", "") != "cusnap-state") {
      return Error{-1, origin + ": not a cusnap state file (field 'format' is not \"cusnap-state\")"};
    }
    state.format_version = IntegerField<int>(json, "format_version");
    if (state.format_version != kStateFormatVersion) {
      return Error{-1, origin + ": state file format version " +
                           std::to_string(state.format_version) + " is not supported (this " +
                           "cusnap reads version " + std::to_string(kStateFormatVersion) + ")"};
    }
    state.driver = json.at("driver").get<std::string>();
    state.created_unix_s = IntegerField<int64_t>(json, "created_unix_s", 0);
    where = "checkpoint_id";
    state.checkpoint_id = json.at("checkpoint_id").get<std::string>();
    if (state.checkpoint_id.empty()) throw std::invalid_argument("empty");
    where = "document";
    const auto& participants = json.at("participants");
    if (!participants.is_array() || participants.empty()) {
      return Error{-1, origin + ": state file lists no participants"};
    }
    for (size_t i = 0; i < participants.size(); ++i) {
      const auto& pj = participants[i];
      where = "participant " + std::to_string(i);
      ParticipantState p;
      p.pid = IntegerField<int>(pj, "pid", 1, kMaxPid);
      where = "participant " + ProcessText(p.pid);
      p.start_time = IntegerField<uint64_t>(pj, "start_time");
      for (const auto& g : pj.at("gpus")) {
        p.gpus.push_back(GpuRef{IntegerField<int>(g, "ordinal", 0, kMaxDevices),
                                g.at("uuid").get<std::string>()});
      }
      p.saved_bytes = IntegerField<uint64_t>(pj, "saved_bytes");
      const auto& records = pj.at("records");
      if (!records.is_array()) throw std::invalid_argument("'records' is not an array");
      for (size_t k = 0; k < records.size(); ++k) {
        where = "participant " + ProcessText(p.pid) + ", record " + std::to_string(k);
        p.records.push_back(RecordFromJson(records[k]));
      }
      for (const auto& other : state.participants) {
        if (other.pid == p.pid) throw std::invalid_argument("pid listed twice");
      }
      state.participants.push_back(std::move(p));
    }
    where = "phases";
    for (const auto& ph : json.at("phases")) {
      const double elapsed_ms = ph.at("elapsed_ms").get<double>();
      if (!(elapsed_ms >= 0 && elapsed_ms < 1e15)) {
        throw std::invalid_argument("elapsed_ms " + ph.at("elapsed_ms").dump() + " is not a time");
      }
      state.phases.push_back(PhaseTiming{ph.at("name").get<std::string>(), elapsed_ms,
                                         IntegerField<uint64_t>(ph, "bytes")});
    }
    where = "digest";
    // Last: a field that cannot be read is named as such, not as a changed file.
    if (!json.contains("digest") || !json["digest"].is_string()) {
      return Error{-1, origin + ": the state file has no digest: it was not written by this "
                                "cusnap as it is, so it does not describe a checkpoint"};
    }
    if (json["digest"].get<std::string>() != DocumentDigest(json)) {
      return Error{-1, origin + ": the state file was changed after the checkpoint wrote it "
                                "(its digest does not match its content), so it no longer "
                                "describes the checkpoint"};
    }
  } catch (const std::exception& e) {
    return Error{-1, origin + ": corrupt state file (" + where + "): " + e.what()};
  }
  return state;
}

Status PrepareStateDir(const std::string& state_dir, std::vector<std::string>* created,
                       DirectoryRole role) {
  if (auto dir = EnsureStateDir(state_dir, created, role); !dir) return dir;  // 0700, never re-moded
  auto temp = MakeTemp(state_dir);
  if (!temp) {
    return Error{temp.error().code, "cannot create a file in " + std::string(role.noun) + " " +
                                        state_dir + ": " + std::strerror(temp.error().code)};
  }
  ::close(temp->first);
  ::unlink(temp->second.c_str());
  return Ok{};
}

Status WriteFileDurably(const std::string& dir, const std::string& name,
                        const std::string& text) {
  auto temp = MakeTemp(dir, name);
  if (!temp) return temp.error();
  const auto [fd, temp_path] = *temp;
  auto fail = [&, fd = fd, temp_path = temp_path](const char* what) -> Status {
    Error error = SysError(what, temp_path);
    ::close(fd);
    ::unlink(temp_path.c_str());
    return error;
  };
  if (::fchmod(fd, 0600) != 0) return fail("cannot chmod");
  if (!WriteAll(fd, text)) return fail("cannot write");
  if (::fsync(fd) != 0) return fail("cannot fsync");
  if (::close(fd) != 0) {
    Error error = SysError("cannot close", temp_path);
    ::unlink(temp_path.c_str());
    return error;
  }
  const std::string path = dir + "/" + name;
  if (::rename(temp_path.c_str(), path.c_str()) != 0) {
    Error error = SysError("cannot rename " + temp_path + " to", path);
    ::unlink(temp_path.c_str());
    return error;
  }
  return FsyncPath(dir, O_DIRECTORY);
}

Status WriteStateFile(const std::string& state_dir, const StateFile& state) {
  return WriteFileDurably(state_dir, kStateFileName, StateToJson(state).dump(2) + "\n");
}

Status RemoveFileDurably(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return SysError("cannot remove", path);
  return FsyncPath(dir, O_DIRECTORY);
}

Status RemoveStateFile(const std::string& state_dir) {
  return RemoveFileDurably(state_dir, kStateFileName);
}

Result<std::string> SetAsideStateFile(const std::string& state_dir) {
  const std::string path = StateFilePath(state_dir);
  const std::string stem = path + ".unusable-" + std::to_string(::time(nullptr));
  std::string aside = stem;
  struct stat st {};
  for (int n = 1; ::lstat(aside.c_str(), &st) == 0; ++n) aside = stem + "." + std::to_string(n);
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    return SysError("cannot rename " + path + " to", aside);
  }
  if (auto synced = FsyncPath(state_dir, O_DIRECTORY); !synced) return synced.error();
  return aside;
}

Result<StateFile> ReadStateFile(const std::string& state_dir) {
  const std::string path = StateFilePath(state_dir);
  Result<std::string> text = ReadStateText(state_dir);
  if (!text) return text.error();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return Error{-1, path + ": corrupt state file (not valid JSON)"};
  }
  return StateFromJson(json, path);
}

Result<std::string> ReadStateText(const std::string& state_dir) {
  const std::string path = StateFilePath(state_dir);
  const UniqueFd dir(::open(state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // The file is opened relative to the directory, never through a symbolic link (O_NOFOLLOW:
  // ELOOP), and without blocking (O_NONBLOCK: a FIFO planted there opens at once and is then
  // refused as not a regular file).
  const UniqueFd fd(dir.valid() ? ::openat(dir.get(), kStateFileName,
                                           O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
                                : -1);
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) {
      return Error{ENOENT, "no checkpoint in " + state_dir + ": " + path + " does not exist"};
    }
    if (err == ELOOP) {
      return Error{ELOOP, "cannot read " + path + ": it is a symbolic link (never followed " +
                              "out of the state directory)"};
    }
    return Error{err, "cannot read " + path + ": " + std::strerror(err)};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return SysError("cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return Error{EINVAL, "cannot read " + path + ": not a regular file (a FIFO, device, " +
                             "socket or directory is never read)"};
  }
  if (st.st_nlink > 1) {
    return Error{EINVAL, "cannot read " + path + ": it has " + std::to_string(st.st_nlink) +
                             " hard links (cusnap writes it with one; a link may point out of " +
                             "the state directory)"};
  }
  if (st.st_size > static_cast<off_t>(kMaxStateFileBytes)) {
    return Error{EFBIG, "cannot read " + path + ": " + std::to_string(st.st_size) +
                            " bytes, more than a state file may hold (" +
                            std::to_string(kMaxStateFileBytes) + ")"};
  }
  std::string text;
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError("cannot read", path);
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > kMaxStateFileBytes) {  // it grew while read
      return Error{EFBIG, "cannot read " + path + ": more than " +
                              std::to_string(kMaxStateFileBytes) + " bytes"};
    }
  }
  return text;
}

}  // namespace cusnap::coord
