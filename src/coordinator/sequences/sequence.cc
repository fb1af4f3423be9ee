// Shared phase plumbing of the checkpoint and restore sequences (sequence.h).
#include "coordinator/sequences/sequence.h"

#include <atomic>
#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <cstdio>
#include <iterator>

#include "common/ids.h"
#include "common/unique_fd.h"
#include "common/text.h"
#include "coordinator/images/restored_aliases.h"
#include "coordinator/record/records.h"

namespace cusnap::coord {

void MergeInto(CommandReport& report, CommandReport later) {
  auto append = [](auto& to, auto& from) {
    to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
  };
  append(report.phases, later.phases);
  append(report.errors, later.errors);
  append(report.notes, later.notes);
  append(report.carrier_files, later.carrier_files);
  for (std::string& lost : later.lost) {
    // A roll forward names again what the command it follows found lost.
    if (std::find(report.lost.begin(), report.lost.end(), lost) == report.lost.end()) {
      report.lost.push_back(std::move(lost));
    }
  }
  report.outcome = later.outcome;
  // A dump whose checkpoint an interrupt stopped was stopped by it too (exit 128+N, not 3).
  report.interrupted = report.interrupted || later.interrupted;
}

std::string ExitedMemoryText(int pid) { return ProcessText(pid) + "'s own memory (it exited)"; }

Status Sequence::IsTheProcessItsEndpointNames(Participant& participant, const Identity& id) {
  const auto start = participant.start_time();
  if (start && *start == id.start_time) return Ok{};
  // Its own pid answered (the endpoint client checks the peer): CRIU brought it back
  // without cusnap, or it is a stale endpoint.
  if (start && !participant.endpoint().empty()) {
    const std::string control_dir = std::filesystem::path(participant.endpoint()).parent_path();
    auto adopted = AdoptRestoredProcess(control_dir, id.pid, id.start_time);
    if (!adopted) return adopted.error();
    if (*adopted) {
      std::lock_guard lock(notes_mutex_);
      report_.notes.push_back(ProcessText(id.pid) + " was restored by CRIU without cusnap (its "
                              "shim names the process it was, started at " +
                              std::to_string(id.start_time) + "): cusnap knows it as that "
                              "process again");
      return Ok{};
    }
  }
  return Error{-1, ProcessText(id.pid) + ": its endpoint reports start time " +
                       std::to_string(id.start_time) + " but the process started at " +
                       (start ? std::to_string(*start) : std::string("(gone)")) +
                       " (a stale endpoint of a reused pid?)"};
}

void Sequence::NameExitedDuringCommand() {
  for (size_t i = 0; i < dead_.size() && i < participants_.size(); ++i) {
    const std::string lost = ExitedMemoryText(participants_[i]->pid());
    if (dead_[i] && std::find(report_.lost.begin(), report_.lost.end(), lost) == report_.lost.end()) {
      report_.lost.push_back(lost);
    }
  }
}

void Sequence::NoteCopy(uint64_t copy_ns, uint64_t zero_bytes) {
  phase_zero_bytes_ += zero_bytes;
  uint64_t seen = phase_copy_ns_.load();
  while (copy_ns > seen && !phase_copy_ns_.compare_exchange_weak(seen, copy_ns)) {
  }
}

void Sequence::NoteInterrupted() {
  report_.interrupted = true;
  report_.errors.push_back(
      "interrupted: stopped " +
      (report_.phases.empty() ? std::string("before its first phase")
                              : "after phase '" + report_.phases.back().name + "'") +
      ", before anything was changed for good");
}

bool Sequence::Exited(size_t index) const {
  const auto now = participants_[index]->start_time();
  return !now || *now != identities_[index].start_time;
}

Result<proto::StepReply> Sequence::Ask(size_t index, proto::StepRequest request, int pass_fd) {
  request.lease_ms = lease_ms_;
  // Only a process the native checkpoint stopped is held (a launcher that never used CUDA
  // runs on: found on the GPU, where torchrun's agent stopped itself).
  request.held = driver_.HoldsStopped() && index < native_.size() && native_[index] != 0;
  auto step = Step(*participants_[index], request, pass_fd);
  if (!step && Exited(index)) {
    dead_[index] = 1;
    return ExitedDuringCommand(participants_[index]->pid(), Lowercase(proto::OpName(request.op)));
  }
  return step;
}

void Sequence::StartLease() {
  if (lease_ms_ == 0 || participants_.empty() || lease_) return;
  std::vector<Participant*> all;
  for (auto& p : participants_) all.push_back(p.get());
  lease_ = std::make_unique<LeaseKeeper>(all, lease_ms_);
}

bool Sequence::Record(PhaseReport phase) {
  phase.copy_ns = phase_copy_ns_.exchange(0);
  phase.zero_bytes = phase_zero_bytes_.exchange(0);
  observer_.PhaseFinished(phase);
  report_.errors.insert(report_.errors.end(), phase.errors.begin(), phase.errors.end());
  const bool ok = phase.ok();
  report_.phases.push_back(std::move(phase));
  return ok;
}

bool Sequence::Phase(const std::string& name, const PhaseWork& work, uint64_t expected_bytes,
                     const std::string& note, const std::string& idle_note) {
  observer_.PhaseStarted(name, participants_.size());
  std::atomic<uint64_t> moved{0};
  PhaseReport phase =
      expected_bytes == 0
          ? RunPhase(name, participants_.size(), work)
          : RunPhase(name, participants_.size(), [&](size_t i) -> Result<uint64_t> {
              auto bytes = work(i);
              if (bytes) observer_.BytesMoved(name, moved += *bytes, expected_bytes);
              return bytes;
            });
  phase.note = phase.ok() && phase.bytes == 0 && !idle_note.empty() ? idle_note : note;
  return Record(std::move(phase));
}

bool Sequence::LocalPhase(const std::string& name, const std::function<Result<uint64_t>()>& work) {
  observer_.PhaseStarted(name, participants_.size());
  PhaseReport phase = RunLocalPhase(name, participants_.size(), work);
  phase.coordinator_only = true;
  return Record(std::move(phase));
}

bool Sequence::CheckPhase(const std::string& name,
                          const std::function<std::vector<std::string>()>& check,
                          const CheckSummary* summary) {
  observer_.PhaseStarted(name, participants_.size());
  std::vector<std::string> problems;
  PhaseReport phase = RunLocalPhase(name, 0, [&]() -> Result<uint64_t> {
    problems = check();
    return uint64_t{0};
  });
  phase.participants = participants_.size();  // discovery fills participants_ as it runs
  if (summary != nullptr) {
    phase.coordinator_only = true;
    phase.note = summary->note;
    phase.bytes = summary->bytes;
  }
  phase.errors.insert(phase.errors.end(), problems.begin(), problems.end());
  phase.error_codes.insert(phase.error_codes.end(), problems.size(), -1);
  return Record(std::move(phase));
}

bool Sequence::LifecyclePhase(proto::Op op, uint64_t expected_bytes, const std::string& note,
                              std::optional<proto::ShimState> leaves) {
  return Phase(Lowercase(proto::OpName(op)), [&](size_t i) -> Result<uint64_t> {
    proto::StepRequest request{op, 0, ""};
    if (op == proto::Op::kReallocate) request.device_map = device_map_;
    auto step = Ask(i, request);
    if (!step) return step.error();
    if (leaves && step->state != *leaves) {
      return Error{-1, ProcessText(participants_[i]->pid()) + ": after " +
                           Lowercase(proto::OpName(op)) + " its cusnap shim is " +
                           Lowercase(proto::ShimStateName(step->state)) + ", not " +
                           Lowercase(proto::ShimStateName(*leaves))};
    }
    NoteCopy(step->copy_ns, step->zero_bytes);
    return step->bytes;
  }, expected_bytes, note);
}

bool Sequence::CarrierFilePhase(proto::Op op,
                                const std::function<std::optional<std::string>(size_t)>& path_of,
                                uint64_t expected_bytes) {
  const bool write = op == proto::Op::kWriteCarrier;
  // A phase that moved nothing says why: a job without GPU memory has no carrier to write,
  // and a `recover` of a job checkpointed in place finds every carrier still in memory.
  const char* name = write ? "write_carriers" : "read_carriers";
  const char* idle = write ? "no carrier to write" : "no carrier on file";
  // The folder goes to each shim as a descriptor, its files by name: a shim in another mount
  // namespace (a container) cannot see this command's path, and CRIU hands its plugin the
  // images directory as a descriptor only.
  UniqueFd folder;
  return Phase(name, [&](size_t i) -> Result<uint64_t> {
    const std::optional<std::string> path = path_of(i);
    if (!path) return uint64_t{0};
    proto::StepRequest request{op, 0, ""};
    // "" (a read): where the shim wrote them; it needs no folder.
    if (path->empty()) return CarrierStep(i, request, -1);
    const std::filesystem::path where(*path);
    const std::string dir = write ? where.parent_path().string() : *path;
    {
      std::lock_guard lock(notes_mutex_);
      if (!folder.valid()) folder.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!folder.valid()) return Error{errno, "cannot open " + dir + ": " + std::strerror(errno)};
    }
    request.carrier_path = write ? where.filename().string() : "";
    return CarrierStep(i, request, folder.get());
  }, expected_bytes, "", idle);
}

Result<uint64_t> Sequence::CarrierStep(size_t i, const proto::StepRequest& request, int folder) {
  auto step = Ask(i, request, folder);
  if (!step) return step.error();
  // File I/O, not copies: the phase's own rate says it; zero chunks were not written.
  NoteCopy(0, step->zero_bytes);
  if (!step->files.empty()) {
    std::lock_guard lock(notes_mutex_);
    for (auto& f : step->files) report_.carrier_files.push_back(std::move(f));
  }
  return step->bytes;
}

bool Sequence::DiscoverPhase() {
  return CheckPhase("discover", [&]() -> std::vector<std::string> {
    auto found = discover_(driver_);
    if (!found) return {found.error().message};
    participants_ = std::move(*found);
    // Before anything changes: a process another command is at work on is refused.
    std::vector<std::string> busy;
    for (const auto& p : participants_) {
      if (p->endpoint().empty()) continue;
      auto lock = CommandLock::Take(p->endpoint(), ProcessText(p->pid()));
      if (lock) {
        command_locks_.push_back(std::move(*lock));
      } else if (lock.error().code == EBUSY) {
        busy.push_back(lock.error().message);
      }  // a lock file that cannot be made (a read-only directory) does not stop the command
    }
    if (!busy.empty()) return busy;
    identities_.assign(participants_.size(), Identity{});
    native_.assign(participants_.size(), 0);
    dead_.assign(participants_.size(), 0);
    PhaseReport identify = RunPhase("identify", participants_.size(), [&](size_t i) -> Result<uint64_t> {
      auto id = Identify(*participants_[i]);
      if (!id) return id.error();
      if (auto same = IsTheProcessItsEndpointNames(*participants_[i], *id); !same) {
        return same.error();
      }
      // Decided now, before anything changes: a process the driver does not know (it never
      // initialized CUDA) gets no native calls. The driver refuses such a process every time
      // it is asked, so a failure is asked again: taken for "no CUDA", a failure that does
      // not last would skip the native restore of a checkpointed process, whose next driver
      // call then waits for ever.
      auto native = driver_.GetState(id->pid);
      if (!native) native = driver_.GetState(id->pid);
      native_[i] = native.ok() ? 1 : 0;
      identities_[i] = std::move(*id);
      return uint64_t{0};
    });
    // From here the command is at work on the job: a shim stopped for the hold and continued
    // by this command (restore, recover) stops itself again when the lease runs out, so the
    // command must renew it from its first request on (lifecycle.h, the hold after a command).
    if (identify.errors.empty()) StartLease();
    return identify.errors;
  });
}

bool Sequence::NativeStepPhase(const std::string& name, CUprocessState when,
                               const std::function<Status(int pid)>& step) {
  return Phase(name, [&](size_t i) -> Result<uint64_t> {
    if (!native_[i] || dead_[i]) return uint64_t{0};
    const int pid = participants_[i]->pid();
    auto state = driver_.GetState(pid);
    if (!state) return state.error();
    if (*state != when) return uint64_t{0};
    if (auto s = step(pid); !s) return s.error();
    return uint64_t{0};
  });
}

bool Sequence::NativeRestorePhase(const std::vector<UuidPair>& pairs) {
  return NativeStepPhase("restore", CU_PROCESS_STATE_CHECKPOINTED,
                         [&](int pid) { return driver_.Restore(pid, pairs); });
}

namespace {

/// "1 (GPU-...)": the GPU's index in the machine's order, and its UUID.
std::string GpuIndexText(const std::vector<std::string>& machine, const std::string& uuid) {
  const auto at = std::find(machine.begin(), machine.end(), uuid);
  return (at == machine.end() ? "?" : std::to_string(at - machine.begin())) + " (" + uuid + ")";
}

/// "40.00 MiB".
std::string MibText(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

void Sequence::UseDeviceMap(const std::vector<DevicePair>& map, const StateFile& state,
                            std::vector<std::string>& problems) {
  auto machine = driver_.DeviceUuids();
  if (!machine) {
    problems.push_back(machine.error().message);
    return;
  }
  std::vector<std::string> recorded;  // every participant's GPUs together
  std::vector<std::vector<std::pair<int, std::string>>> gpus;
  std::vector<std::vector<std::pair<int, uint64_t>>> allocations;
  for (const auto& p : state.participants) {
    auto& g = gpus.emplace_back();
    for (const auto& ref : p.gpus) {
      recorded.push_back(ref.uuid);
      g.emplace_back(ref.ordinal, ref.uuid);
    }
    // What reallocate creates: the device allocations each participant created.
    auto& a = allocations.emplace_back();
    for (const auto& r : p.records) {
      if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation) &&
          (r.flags & proto::kCreator) != 0 && r.location_type == CU_MEM_LOCATION_TYPE_DEVICE) {
        a.emplace_back(r.location_id, r.object_size);
      }
    }
  }
  auto pairs = ResolveDeviceMap(map, *machine, recorded);
  if (!pairs) {
    problems.push_back(pairs.error().message);
    return;
  }
  gpu_pairs_ = std::move(*pairs);
  device_map_.clear();
  for (const auto& p : gpu_pairs_) {
    device_map_ += (device_map_.empty() ? "" : ",") + p.from + "=" + p.to;
  }
  // Memory the native restore brings back by itself (contexts, modules, memory the shim does
  // not own) comes on top and is not counted.
  for (const auto& [uuid, needed] : BytesMovedOnto(gpu_pairs_, gpus, allocations)) {
    auto free = driver_.DeviceFreeBytes(uuid);
    if (!free) {
      if (free.error().code != -2) problems.push_back(free.error().message);
      continue;
    }
    if (*free >= needed) continue;
    problems.push_back("the device map moves " + std::to_string(needed) + " bytes (" +
                       MibText(needed) + ") of allocations onto GPU " +
                       GpuIndexText(*machine, uuid) + ", which has " + std::to_string(*free) +
                       " bytes (" + MibText(*free) + ") free; free memory on it or choose "
                       "another map");
  }
}

bool Sequence::NativeUnlockPhase() {
  return NativeStepPhase("unlock", CU_PROCESS_STATE_LOCKED,
                         [&](int pid) { return driver_.Unlock(pid); });
}

Result<uint64_t> Sequence::CompareWithRecord(int pid, const std::vector<proto::Record>& expected,
                                             const std::vector<proto::Record>& actual,
                                             const std::vector<int>& exited,
                                             const std::vector<proto::ObjectId>& dropped) {
  auto canonical = [&](const std::vector<proto::Record>& records) {
    std::vector<std::string> out;
    for (const auto& r : records) {
      const bool orphan = r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation) ||
                          r.kind == static_cast<uint32_t>(proto::RecordKind::kMapping);
      if (orphan && std::find(exited.begin(), exited.end(), r.id.creator_pid) != exited.end()) {
        continue;
      }
      const bool team = r.kind >= static_cast<uint32_t>(proto::RecordKind::kMulticast) &&
                        r.kind <= static_cast<uint32_t>(proto::RecordKind::kMulticastMapping);
      if (team && std::any_of(dropped.begin(), dropped.end(),
                              [&](const proto::ObjectId& d) { return d == r.id; })) {
        continue;
      }
      out.push_back(RecordToJson(r).dump());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto want = canonical(expected);
  const auto got = canonical(actual);
  if (want == got) return uint64_t{0};
  std::vector<std::string> missing, extra;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                      std::back_inserter(extra));
  std::string text = ProcessText(pid) + ": after restore the sharing table " +
                     "differs from the checkpoint (" + std::to_string(got.size()) +
                     " records, " + std::to_string(want.size()) + " recorded)";
  for (size_t k = 0; k < missing.size() && k < 3; ++k) text += "; recorded, now missing: " + missing[k];
  for (size_t k = 0; k < extra.size() && k < 3; ++k) text += "; now present, not recorded: " + extra[k];
  return Error{-1, text};
}

Status Sequence::InspectInto(std::vector<ParticipantView>& views, size_t index) {
  auto inspected = InspectWithImporters(*participants_[index]);
  if (!inspected) return inspected.error();
  auto& v = views[index];
  v.pid = identities_[index].pid;
  v.start_time = identities_[index].start_time;
  v.untracked_imports = identities_[index].untracked_imports;
  v.untracked = identities_[index].untracked;
  v.unsupported = identities_[index].unsupported;
  v.records = std::move(inspected->records);
  v.importers = std::move(inspected->importers);
  v.device_uuids.clear();
  const std::string& joined = inspected->device_uuids;  // "GPU-a,GPU-b"
  for (size_t at = 0; at < joined.size();) {
    const size_t comma = std::min(joined.find(',', at), joined.size());
    v.device_uuids.push_back(joined.substr(at, comma - at));
    at = comma + 1;
  }
  return Ok{};
}

}  // namespace cusnap::coord
