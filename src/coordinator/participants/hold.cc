// The long-suspend hold (hold.h): stop a checkpointed participant, continue it at restore.
#include "coordinator/participants/hold.h"

#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/control_dir.h"
#include "common/hold_marker.h"
#include "common/settings.h"
#include "common/text.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {
namespace {

std::string MarkerPath(const std::string& control_dir, int pid) {
  return HeldMarkerPath(control_dir, pid);
}

/// A marker while ContinueHeld continues its process: renamed to this before SIGCONT, so
/// that the process's hold guard (shim/hold/hold_guard.h), which stops it again
/// while the marker exists, cannot undo the continue.
constexpr const char* kContinuingSuffix = ".continuing";

/// A marker records the namespace of the pid in its name (common/hold_marker.h): a job
/// restored in a namespace of its own (cli/pid_namespace.h) has markers whose pids mean
/// nothing here. Read under either name; nullopt when there is no readable marker.
std::optional<HoldMarker> ReadMarker(const std::string& control_dir, int pid) {
  for (const std::string& path : {MarkerPath(control_dir, pid),
                                  MarkerPath(control_dir, pid) + kContinuingSuffix}) {
    if (auto marker = ReadHoldMarker(path)) return marker;
  }
  return std::nullopt;
}

/// Whether `marker` names a process of another PID namespace (not to be judged, continued
/// or removed from here).
bool OfAnotherNamespace(const HoldMarker& marker) {
  return marker.pid_namespace != 0 && marker.pid_namespace != OwnPidNamespace();
}

/// The start time a marker records (under either name), nullopt when there is no readable
/// marker.
std::optional<uint64_t> MarkerStartTime(const std::string& control_dir, int pid) {
  const auto marker = ReadMarker(control_dir, pid);
  if (!marker) return std::nullopt;
  return marker->start_time;
}

/// Removes the marker of `pid` under either name.
void RemoveMarker(const std::string& control_dir, int pid) {
  const std::string marker = MarkerPath(control_dir, pid);
  ::unlink(marker.c_str());
  ::unlink((marker + kContinuingSuffix).c_str());
}

/// Writes the marker of `pid` (mode 0600, replaced whole). Error code: errno.
Status WriteMarker(const std::string& control_dir, int pid, uint64_t start_time) {
  return WriteHoldMarker(MarkerPath(control_dir, pid), HoldMarker{start_time, OwnPidNamespace(), {}});
}

/// Polls until `want(pid)` holds or `wait_ms` passed; true when it holds.
template <typename Want>
bool WaitFor(int pid, int wait_ms, Want want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    if (want(pid)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Error SignalError(int pid, const char* what, int code) {
  return Error{code, ProcessText(pid) + ": " + what + ": " + std::strerror(code)};
}

/// The pids that have a hold marker (under either name) in `control_dir`.
std::vector<int> MarkedPids(const std::string& control_dir) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(control_dir, ec)) {
    std::string name = entry.path().filename().string();
    for (const std::string& suffix : {std::string(kContinuingSuffix), std::string(".held")}) {
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        name.resize(name.size() - suffix.size());
      }
    }
    if (name.empty() || name.size() > 9 || name.find_first_not_of("0123456789") != std::string::npos) {
      continue;  // not a marker
    }
    const int marked = std::stoi(name);
    if (std::find(pids.begin(), pids.end(), marked) == pids.end()) pids.push_back(marked);
  }
  return pids;
}

/// Appends the marker files of `pid` that exist (under either name) to `paths`.
void AppendMarkerFiles(const std::string& control_dir, int pid, std::vector<std::string>& paths) {
  for (const std::string& path : {MarkerPath(control_dir, pid),
                                  MarkerPath(control_dir, pid) + kContinuingSuffix}) {
    if (::access(path.c_str(), F_OK) == 0) paths.push_back(path);
  }
}

}  // namespace

Result<HoldMode> ParseHoldMode(const std::string& text) {
  if (text.empty()) return HoldMode::kStop;
  // The table's values are in HoldMode's order: stop, run.
  if (const auto index = settings::WordIndex(settings::kHold, text)) {
    return static_cast<HoldMode>(*index);
  }
  return Error{EINVAL, settings::Refusal(settings::kHold, text)};
}

Result<HoldMode> HoldModeFromEnvironment() {
  const char* text = settings::Value(settings::kHold);
  return ParseHoldMode(text ? text : "");
}

Status StopHeld(const std::string& control_dir, int pid, int wait_ms) {
  const auto start = ProcessStartTime(pid);
  if (!start) return SignalError(pid, "cannot stop it for the hold", ESRCH);
  // The marker first: a process found stopped with no marker is never continued by cusnap.
  if (auto s = WriteMarker(control_dir, pid, *start); !s) return s.error();
  if (::kill(pid, SIGSTOP) != 0) {
    const int why = errno;
    ::unlink(MarkerPath(control_dir, pid).c_str());
    return SignalError(pid, "SIGSTOP for the hold failed", why);
  }
  const auto gone = [&](int p) { return ProcessStartTime(p) != start || ProcessExited(p); };
  if (!WaitFor(pid, wait_ms, [&](int p) { return StoppedState(p) || gone(p); }) || gone(pid)) {
    ::kill(pid, SIGCONT);
    ::unlink(MarkerPath(control_dir, pid).c_str());
    if (gone(pid)) {
      // Seen with a shell that has job control: it lists the stopped job and, when it
      // exits, sends its stopped jobs SIGTERM (bash's terminate_stopped_jobs).
      return Error{ESRCH, ProcessText(pid) + ": ended right after SIGSTOP stopped it for the "
                              "hold (its shell may end the stopped jobs it lists: start the "
                              "job with setsid, or disown it, or hold it with CUSNAP_HOLD=run)"};
    }
    return Error{ETIMEDOUT, ProcessText(pid) + ": not stopped " + std::to_string(wait_ms) +
                                " ms after SIGSTOP; left running (its CUDA calls wait)"};
  }
  return Ok{};
}

namespace {

/// SIGCONT to `pid` with its marker renamed away first: the marker stays (as "continuing",
/// which a command killed here leaves for the next one) until SIGCONT was sent, so a failed
/// continue can be tried again, and the process's hold guard, which stops it again while the
/// marker exists, cannot undo this continue.
Status SendContinue(const std::string& control_dir, int pid) {
  const std::string marker = MarkerPath(control_dir, pid);
  const std::string continuing = marker + kContinuingSuffix;
  if (::rename(marker.c_str(), continuing.c_str()) != 0 && errno != ENOENT) {
    return SignalError(pid, "cannot rename its hold marker before SIGCONT", errno);
  }
  if (::kill(pid, SIGCONT) != 0) {
    const int why = errno;
    ::rename(continuing.c_str(), marker.c_str());
    return SignalError(pid, "SIGCONT after the hold failed", why);
  }
  ::unlink(continuing.c_str());
  return Ok{};
}

/// After SendContinue: waits (at most `wait_ms`) until `pid` runs and stays running. Its
/// hold guard may stop it once more right after (a thread that found the marker before it
/// was renamed, shim/hold/hold_guard.h): with no marker left it is ours to continue
/// again. Error (ETIMEDOUT) naming the pid when it is still stopped.
Status KeepContinued(const std::string& control_dir, int pid, int wait_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    if (WaitFor(pid, 200, [](int p) { return !StoppedState(p); })) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!StoppedState(pid)) return Ok{};  // runs, and stays running
    }
    if (std::chrono::steady_clock::now() >= deadline || ReadMarker(control_dir, pid)) break;
    ::kill(pid, SIGCONT);
  }
  if (!StoppedState(pid)) return Ok{};
  return Error{ETIMEDOUT, ProcessText(pid) + ": still stopped " + std::to_string(wait_ms) +
                              " ms after SIGCONT (stopped by something else too?)"};
}

/// ContinueHeld, saying whether it sent SIGCONT (false: no marker, or a stale one).
Result<bool> ContinueIfHeld(const std::string& control_dir, int pid, int wait_ms) {
  const auto recorded = ReadMarker(control_dir, pid);
  if (!recorded || OfAnotherNamespace(*recorded)) return false;  // none, or not ours to judge
  if (!AliveHere(pid, recorded->start_time)) {  // exited, or the pid was reused: stale
    RemoveMarker(control_dir, pid);
    return false;
  }
  if (Status sent = SendContinue(control_dir, pid); !sent) return sent.error();
  if (Status runs = KeepContinued(control_dir, pid, wait_ms); !runs) return runs.error();
  return true;
}

}  // namespace

Status ContinueHeld(const std::string& control_dir, int pid, int wait_ms) {
  if (auto continued = ContinueIfHeld(control_dir, pid, wait_ms); !continued) {
    return continued.error();
  }
  return Ok{};
}

Status ContinueRestored(const std::string& control_dir, int pid) {
  if (!StoppedState(pid)) return Ok{};
  if (Status sent = SendContinue(control_dir, pid); !sent) return sent;
  return KeepContinued(control_dir, pid, 5000);
}

bool IsHeld(const std::string& control_dir, int pid) {
  const auto recorded = MarkerStartTime(control_dir, pid);
  return recorded && ProcessStartTime(pid) == recorded && StoppedState(pid);
}

std::vector<std::string> ContinueHeldJob(const std::string& control_dir, int pid,
                                         std::vector<int>* continued) {
  const std::vector<int> pids = pid > 0 ? ProcessTree(pid) : MarkedPids(control_dir);
  std::vector<std::string> problems;
  for (const int p : pids) {
    auto done = ContinueIfHeld(control_dir, p, 5000);
    if (!done) {
      problems.push_back(done.error().message);
    } else if (*done && continued != nullptr) {
      continued->push_back(p);
    }
  }
  return problems;
}

std::optional<proto::ShimState> HeldPhase(const std::string& control_dir, int pid) {
  const auto marker = ReadMarker(control_dir, pid);
  if (!marker) return std::nullopt;
#define CUSNAP_STATE_NAMED(name, value, text) \
  if (marker->phase == (text)) return proto::ShimState::name;
  CUSNAP_PROTO_SHIM_STATES(CUSNAP_STATE_NAMED)
#undef CUSNAP_STATE_NAMED
  return std::nullopt;
}

std::optional<HeldView> HeldStatus(const std::string& control_dir, int pid) {
  if (!IsHeld(control_dir, pid)) return std::nullopt;
  // A shim that held itself names its phase in its marker (a restore that continued it was
  // killed, maybe half way): "released" would hide where it stopped.
  const auto phase = HeldPhase(control_dir, pid);
  // Its memory is released only while it is RELEASED: a restore killed half way left it
  // reallocated, or further.
  const bool released = !phase || *phase == proto::ShimState::kReleased;
  HeldView view;
  view.state = phase.value_or(proto::ShimState::kReleased);
  view.text =
      std::string(phase ? "held: stopped again by itself (no cusnap command was at work on "
                          "it for a lease)"
                        : "held: stopped by the 'cusnap checkpoint' or 'cusnap dump' that "
                          "released its memory") +
      (released ? "" : "; its memory is back on the GPU, the restore unfinished") +
      "; 'cusnap restore' (or 'cusnap recover') continues it and goes on" +
      (phase ? "" : " (CUSNAP_HOLD=run keeps such a job running)") +
      "; its tables were not read (the process is stopped)";
  return view;
}

bool RestoredUnfinished(const std::string& control_dir, int pid) {
  const auto marker = ReadMarker(control_dir, pid);
  if (!marker || OfAnotherNamespace(*marker) || !StoppedState(pid)) return false;
  const auto now = ProcessStartTime(pid);
  return now && *now != marker->start_time;
}

std::string StoppedProcessText(const std::string& control_dir, int pid, char state) {
  if (!RestoredUnfinished(control_dir, pid)) return StoppedText(pid, state);
  return ProcessText(pid, ProcessName(pid)) + " is stopped with the hold marker of the dumped " +
         "process it replaces: CRIU brought it back for a 'cusnap restore --images-dir' that " +
         "did not finish; run that restore again (the same --images-dir) to finish it";
}

std::vector<std::string> StaleHoldMarkers(const std::string& control_dir) {
  std::vector<std::string> stale;
  for (const int pid : MarkedPids(control_dir)) {
    const auto marker = ReadMarker(control_dir, pid);
    if (marker && OfAnotherNamespace(*marker)) continue;  // judged in its namespace
    if (marker && AliveHere(pid, marker->start_time)) continue;  // its process lives
    if (RestoredUnfinished(control_dir, pid)) continue;  // says why its process is stopped
    AppendMarkerFiles(control_dir, pid, stale);
  }
  return stale;
}

std::vector<std::string> StaleHoldMarkersOfJobDir(const std::string& job_dir) {
  std::vector<std::string> stale;
  for (const int pid : MarkedPids(job_dir)) {
    const auto marker = ReadMarker(job_dir, pid);
    if (!marker || marker->pid_namespace == 0) continue;
    const bool lives = std::ranges::any_of(AllPids(), [&](int here) {
      struct stat ns {};
      const std::vector<int> pids = NamespacePids(here);
      return !pids.empty() && pids.back() == pid &&
             ::stat(("/proc/" + std::to_string(here) + "/ns/pid").c_str(), &ns) == 0 &&
             static_cast<uint64_t>(ns.st_ino) == marker->pid_namespace;
    });
    if (lives) continue;
    AppendMarkerFiles(job_dir, pid, stale);
  }
  return stale;
}

std::vector<std::string> StaleHoldMarkersBelow(const std::string& control_dir) {
  std::vector<std::string> stale = StaleHoldMarkers(control_dir);
  const std::vector<std::string> job_dirs = JobControlDirs(control_dir);
  for (auto dir = job_dirs.begin() + 1; dir != job_dirs.end(); ++dir) {
    for (auto& marker : StaleHoldMarkersOfJobDir(*dir)) stale.push_back(std::move(marker));
  }
  return stale;
}

std::vector<std::string> HoldAgain(const std::string& control_dir, const std::vector<int>& pids) {
  std::vector<std::string> problems;
  for (const int p : pids) {
    if (!ProcessStartTime(p)) continue;  // exited meanwhile: nothing to hold
    if (auto s = StopHeld(control_dir, p); !s) problems.push_back(s.error().message);
  }
  return problems;
}

namespace {

class HoldingDriver final : public CheckpointDriver {
 public:
  HoldingDriver(std::unique_ptr<CheckpointDriver> inner, std::string control_dir)
      : inner_(std::move(inner)), control_dir_(std::move(control_dir)) {}

  std::string Describe() const override { return inner_->Describe(); }
  bool simulated() const override { return inner_->simulated(); }
  Result<CUprocessState> GetState(int pid) override { return inner_->GetState(pid); }
  Status Lock(int pid, unsigned timeout_ms) override { return inner_->Lock(pid, timeout_ms); }
  Status Checkpoint(int pid) override {
    if (auto s = inner_->Checkpoint(pid); !s) return s;
    // Pid 1 here is the init of this command's own PID namespace (a container's entry point:
    // cusnap joins the job's namespace), which ignores every signal sent from inside it,
    // SIGSTOP too: it is held running, its CUDA calls waiting, as CUSNAP_HOLD=run holds.
    if (pid == 1) return Ok{};
    if (auto s = StopHeld(control_dir_, pid); !s) {
      return Error{s.error().code, "the native checkpoint succeeded, but the hold did not: " +
                                       s.error().message};
    }
    return Ok{};
  }
  Status Restore(int pid, std::span<const UuidPair> pairs) override {
    // The driver restores through the process itself: it must run.
    if (auto s = ContinueHeld(control_dir_, pid); !s) return s;
    return inner_->Restore(pid, pairs);
  }
  Status Unlock(int pid) override { return inner_->Unlock(pid); }
  Result<std::vector<std::string>> DeviceUuids() override { return inner_->DeviceUuids(); }
  Result<uint64_t> DeviceFreeBytes(const std::string& uuid) override {
    return inner_->DeviceFreeBytes(uuid);
  }
  Result<std::vector<std::string>> DeviceNames() override { return inner_->DeviceNames(); }
  bool HoldsStopped() const override { return true; }

 private:
  std::unique_ptr<CheckpointDriver> inner_;
  std::string control_dir_;
};

}  // namespace

std::unique_ptr<CheckpointDriver> WithHold(std::unique_ptr<CheckpointDriver> inner,
                                           const std::string& control_dir, HoldMode mode) {
  if (mode == HoldMode::kRun) return inner;
  return std::make_unique<HoldingDriver>(std::move(inner), control_dir);
}

}  // namespace cusnap::coord
