// `cusnap dump`, `cusnap restore --images-dir` and `cusnap inspect` of an images directory:
// the coordinator's dump sequences (coordinator/sequences/dump.h) driven like checkpoint and restore.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/checks.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "cli/pid_namespace.h"
#include "cli/version.h"
#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/text.h"
#include "coordinator/sequences/dump.h"
#include "coordinator/participants/hold.h"
#include "coordinator/images/criu.h"
#include "coordinator/images/manifest.h"
#include "coordinator/participants/lease.h"
#include "coordinator/proc/processes.h"
#include "coordinator/images/restore_record.h"
#include "coordinator/record/state_file.h"

namespace cusnap::cli {

int DumpCommand(const DumpArgs& args) {
  const Target target{args.pid, false};
  coord::DumpOptions options;
  options.checkpoint = coord::CheckpointOptions{args.images_dir, 0,
                                                PidOption(args.pid)};
  options.checkpoint.lease_ms = coord::LeaseMsFromEnvironment();
  options.checkpoint.images_root = args.pid;
  options.root_pid = args.pid;
  options.control_dir = ControlDir();
  options.leave_running = args.leave_running;
  options.own_pid_namespace = args.in_job_namespace;
  options.cusnap_version = CliBuildInfo();
  return Drive("dump", target, args.json, coord::kDumpPhaseCount, kExitRefused,
               [&](const coord::Discoverer& d, coord::CheckpointDriver& drv,
                   coord::PhaseObserver& o, coord::Interrupt& i) {
                 return coord::Dump(options, d, drv, o, &i);
               });
}

namespace {

/// `restore --images-dir` in the PID namespace this process is in; `resume_root` as
/// ImagesRestoreOptions has it.
int RestoreImagesHere(const std::string& images_dir, const std::string& device_map, bool json,
                      int resume_root = 0) {
  coord::ImagesRestoreOptions options;
  options.images_dir = images_dir;
  options.resume_root = resume_root;
  options.lease_ms = coord::LeaseMsFromEnvironment();
  if (!ParseDeviceMapArg("restore", device_map, options.device_map)) return kExitUsage;
  const std::string control_dir = ControlDir();
  options.control_dir = control_dir;
  options.discoverer_for = [control_dir](int restored_root) {
    // A job `cusnap run --pid-namespace` started keeps its endpoints and hold markers in a
    // control directory of its own (its environment, restored by CRIU, says which).
    AdoptJobControlDir(restored_root);
    const std::string job_dir = ControlDir();
    // CRIU brings a held job back as it was dumped: stopped (coordinator/participants/hold.h), with the
    // markers the dump left (of this PID namespace or, restored in a namespace of its own,
    // of another), or with none after a --leave-running dump (resuming the job in place
    // removed them). These new processes are this restore's own: each is continued, its
    // marker renamed away first so that its hold guard does not stop it again.
    for (const int pid : coord::ProcessTree(restored_root)) {
      if (Status s = coord::ContinueRestored(job_dir, pid); !s) {
        std::fprintf(stderr, "cusnap restore: %s\n", s.error().message.c_str());
      }
    }
    return coord::EndpointDiscoverer(coord::DiscoveryOptions{job_dir, restored_root, false});
  };
  return Drive("restore", Target{}, json, coord::kImagesRestorePhaseCount, kExitRestoreRefused,
               [&](const coord::Discoverer&, coord::CheckpointDriver& drv,
                   coord::PhaseObserver& o, coord::Interrupt& i) {
                 return coord::RestoreImages(options, drv, o, &i);
               });
}

/// The manifest of `images_dir` (or the pending one of an interrupted dump); nullopt when
/// neither can be read (the restore itself names why).
std::optional<coord::Manifest> ManifestOf(const std::string& images_dir) {
  auto manifest = coord::ReadManifest(images_dir);
  if (!manifest && coord::HasPendingManifest(images_dir)) manifest = coord::ReadPendingManifest(images_dir);
  if (!manifest) return std::nullopt;
  return std::move(*manifest);
}

/// `cusnap restore --images-dir <dir> --pid-namespace` in place of this process, which loaded
/// the driver already (a process forked after cuInit, as the namespace's init would be, has
/// no usable driver). Returns `rc` only when it cannot run, having said so.
int RestoreAgainInOwnPidNamespace(const std::string& images_dir, const std::string& device_map, int rc) {
  std::vector<std::string> args = {"cusnap", "restore", "--images-dir", images_dir, "--pid-namespace"};
  if (!device_map.empty()) args.insert(args.end(), {"--device-map", device_map});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  // The first attempt's interrupt watch left SIGINT and SIGTERM ignored (interrupt_watch.cc),
  // which an exec keeps: the restore run again, and CRIU under it, take them as usual.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  // By its path, so that the process is named cusnap again (ps, /proc/<pid>/comm).
  ::execv((SelfDir() + "/cusnap").c_str(), argv.data());
  std::fprintf(stderr, "cusnap restore: cannot run the restore again (%s): run `cusnap restore "
               "--images-dir %s --pid-namespace`\n", std::strerror(errno), images_dir.c_str());
  return rc;
}

// A restore from here that runs now, or one killed after CRIU brought the job back
// (restore_record.h): that tree is the job, stopped as CRIU restored it; it is finished where
// it runs, in its own PID namespace or this one. Nothing when no earlier restore is left.
std::optional<int> FinishEarlierRestore(const std::string& images_dir,
                                        const std::optional<coord::Manifest>& manifest,
                                        const std::string& device_map, bool json) {
  const auto earlier = coord::ReadRestoreRecord(images_dir);
  if (!earlier) return std::nullopt;
  if (earlier->running) {
    return EndRefused("restore", json,
                      "another `cusnap restore` is restoring from " + images_dir + " now",
                      kExitRestoreRefused);
  }
  const int root = manifest ? coord::InterruptedRestoreRoot(*manifest, earlier->started) : 0;
  if (root == 0) return std::nullopt;
  // CRIU writes its pid file once every process is back: before, it may still be at work (it
  // outlives a restore killed while it ran).
  if (::access((images_dir + "/restored.pid").c_str(), F_OK) != 0) {
    const std::string pid = std::to_string(root);
    return EndRefused("restore", json,
                      "a CRIU restore from " + images_dir + " is still at work, or was cut short "
                      "(the job's root is pid " + pid + " here): wait for it, or end that tree "
                      "(kill -9 " + pid + ") and restore again",
                      kExitRestoreRefused);
  }
  std::fprintf(stderr, "cusnap restore: note: a restore from %s was killed after CRIU brought "
               "the job back (its root is pid %d here): this restore finishes it\n",
               images_dir.c_str(), root);
  return InPidNamespaceOf("restore", root, [&](int ns_root) {
    return RestoreImagesHere(images_dir, device_map, json, ns_root);
  });
}

// A job that ran in this PID namespace keeps its endpoints and start-time aliases in the
// control directory by pid: restored in a namespace of its own, its processes would take over
// the endpoint of a cusnap process that holds one of their pids here (that job could then no
// longer be checkpointed, and status would lose it). Nothing when no such pid is held.
std::optional<int> RefuseTakingOverAnEndpoint(const std::vector<coord::TakenId>& taken, bool json) {
  for (const coord::TakenId& t : taken) {
    if (!t.participant || !ServesEndpoint(ControlDir(), t.id)) continue;
    return EndRefused("restore", json,
                      ProcessText(t.id) + " of the dump is held here by " +
                          ProcessText(t.id, coord::ProcessName(t.id)) + ", a process of a "
                          "cusnap job: the restored process would take over its endpoint (" +
                          EndpointPath(ControlDir(), t.id) + ") in a PID namespace as in this "
                          "one; end or dump that job first",
                      kExitRestoreRefused);
  }
  return std::nullopt;
}

// The restore in this PID namespace, whose ids were free at the check: a pid taken after it
// makes CRIU fail before any process came back, so the restore changed nothing and runs
// again where the ids are free. With --json one document answers: its error says to run the
// restore again.
int RestoreHereOrAgainInOwnPidNamespace(const std::string& images_dir,
                                        const std::string& device_map, bool json) {
  const int rc = RestoreImagesHere(images_dir, device_map, json);
  const int late = rc == kExitRestoreRefused && !json ? coord::CriuRestorePidTaken(images_dir) : 0;
  if (late == 0) return rc;
  std::fprintf(stderr, "cusnap restore: note: pid %d of the dump was taken by another process "
               "while CRIU restored the job: it is restored again, in a PID namespace of its "
               "own\n", late);
  return RestoreAgainInOwnPidNamespace(images_dir, device_map, rc);
}

// The restore in a new PID namespace, whose init serves it; names the job's root as this
// machine numbers it.
int RestoreInOwnPidNamespace(const std::string& images_dir, const coord::Manifest& manifest,
                             const std::string& device_map, bool json) {
  int init = 0;
  std::string why;
  const std::vector<int> ids = coord::DumpedIds(images_dir, manifest);
  const int first_free = ids.empty() ? 2 : *std::max_element(ids.begin(), ids.end()) + 1;
  const int rc = RunInNewPidNamespace(
      [&] { return RestoreImagesHere(images_dir, device_map, json); }, first_free, init, why);
  if (init == 0) return EndUntouched("restore", json, why, rc);
  if (!why.empty()) std::fprintf(stderr, "cusnap restore: %s\n", why.c_str());
  if (rc != kExitOk) return rc;
  const int root = HostPidOf(init, manifest.root_pid);
  if (root <= 0) {
    // It ended at once (its pid here reads 0): nothing left to name.
    std::fprintf(stderr, "cusnap restore: the job was restored in a PID namespace of its own "
                 "(its init was pid %d here), and its root (pid %d there) has ended since\n",
                 init, manifest.root_pid);
  } else {
    std::fprintf(stderr, "cusnap restore: the job runs in a PID namespace of its own (its init "
                 "is pid %d here): its root is pid %d there and pid %d here; name it with "
                 "--pid %d (its root as this machine numbers it; the pid of another of its "
                 "processes names that process's subtree, as for any job)\n",
                 init, manifest.root_pid, root, root);
  }
  return rc;
}

}  // namespace

int RestoreImagesCommand(const std::string& images_dir, const std::string& device_map, bool json,
                         bool pid_namespace) {
  const auto manifest = ManifestOf(images_dir);
  if (const std::optional<int> rc = FinishEarlierRestore(images_dir, manifest, device_map, json)) {
    return *rc;
  }
  // No manifest, or a job that still runs: refused where it runs (restoring would make a
  // second copy), by the restore's own checks.
  if (!manifest || coord::DumpedJobRuns(*manifest, coord::RunningHere(ControlDir()))) {
    return RestoreImagesHere(images_dir, device_map, json);
  }
  if (!pid_namespace && manifest->own_pid_namespace) {
    std::fprintf(stderr, "cusnap restore: note: the job ran in a PID namespace of its own: it is "
                 "restored in a PID namespace of its own again\n");
    pid_namespace = true;
  }
  const std::vector<coord::TakenId> taken = coord::DumpIdsTaken(images_dir, *manifest, coord::AliveHere);
  if (!manifest->own_pid_namespace) {
    if (const std::optional<int> rc = RefuseTakingOverAnEndpoint(taken, json)) return *rc;
  }
  if (!pid_namespace && taken.empty()) {
    return RestoreHereOrAgainInOwnPidNamespace(images_dir, device_map, json);
  }
  if (!pid_namespace) {
    // Ids held by other processes here are free in a namespace of the job's own.
    std::fprintf(stderr, "cusnap restore: note: %s %d of the dump is held by another process "
                 "here: the job is restored in a PID namespace of its own, where it keeps its "
                 "ids\n", taken.front().participant ? "pid" : "process or thread id",
                 taken.front().id);
  }
  return RestoreInOwnPidNamespace(images_dir, *manifest, device_map, json);
}

int InspectImagesCommand(const std::string& images_dir, bool json) {
  // A manifest supersedes a pending one left beside it (the dump removes that one after).
  const bool pending = !coord::HasManifest(images_dir) && coord::HasPendingManifest(images_dir);
  auto manifest = pending ? coord::ReadPendingManifest(images_dir) : coord::ReadManifest(images_dir);
  if (!manifest) {
    if (json) {
      std::printf("%s\n", nlohmann::json{{"images_dir", images_dir},
                                         {"failed_dump", coord::IsFailedDump(images_dir)},
                                         {"exit_code", kExitError},
                                         {"errors", {manifest.error().message}}}.dump(2).c_str());
    }
    std::fprintf(stderr, "cusnap inspect: %s\n", manifest.error().message.c_str());
    return kExitError;
  }
  const std::string incomplete = pending ? coord::WhyCriuDumpIncomplete(images_dir) : "";
  if (json) {
    nlohmann::json doc = coord::ManifestToJson(*manifest);
    doc["pending"] = pending;
    if (pending) doc["criu_finished"] = incomplete.empty();
    if (!incomplete.empty()) doc["why_incomplete"] = incomplete;
    if (auto state = coord::ReadStateFile(images_dir); state) doc["state"] = coord::StateToJson(*state);
    std::printf("%s\n", doc.dump(2).c_str());
    return kExitOk;
  }
  if (pending && incomplete.empty()) {
    std::printf("interrupted dump: %s has CRIU's complete images but no manifest (the dump "
                "stopped after CRIU finished); 'cusnap restore --images-dir %s' writes the "
                "manifest and restores the job\n", images_dir.c_str(), images_dir.c_str());
  } else if (pending) {
    std::printf("interrupted dump: %s holds no complete images (%s); the job was not taken to "
                "disk: if its processes still run, 'cusnap status' names their state\n",
                images_dir.c_str(), incomplete.c_str());
  }
  const auto& m = *manifest;
  const std::time_t created = static_cast<std::time_t>(m.created_unix_s);
  char when[64] = "?";
  if (std::tm tm{}; ::gmtime_r(&created, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::printf("images: %s (%smanifest format %d)\n", images_dir.c_str(),
              pending ? "pending " : "", m.format_version);
  std::printf("written %s by %s with CRIU %s\n", when, m.cusnap_version.c_str(),
              coord::CriuVersionNumber(m.criu_version).c_str());
  std::printf("driver %s, checkpoint %s, job root pid %d%s\n", m.driver.c_str(),
              m.checkpoint_id.c_str(), m.root_pid, m.left_running ? " (left running)" : "");
  for (const auto& g : m.gpus) {
    std::printf("gpu %d: %s%s%s\n", g.ordinal, g.uuid.c_str(), g.model.empty() ? "" : " ",
                g.model.c_str());
  }
  for (const auto& p : m.participants) {
    std::printf("pid %d: %s in its host carrier, on", p.pid, FormatBytes(p.saved_bytes).c_str());
    for (const auto& g : p.gpus) std::printf(" %s", g.c_str());
    std::printf("%s\n", p.gpus.empty() ? " no GPU" : "");
  }
  if (pending) return kExitOk;  // its files are hashed when the dump is completed
  std::printf("%zu files, %s, digests %s per chunk of up to %s:\n", m.files.size(),
              FormatBytes(m.TotalBytes()).c_str(), kChunkDigestName,
              FormatBytes(m.chunk_bytes).c_str());
  for (const auto& f : m.files) {
    uint64_t digested = 0;
    for (const auto& c : f.chunks) digested += c.bytes;
    // One chunk: its digest (xxh128sum of the whole file says the same); else the count, and
    // the zeros (holes) no chunk covers.
    const std::string what = f.chunks.size() == 1 && digested == f.bytes
                                 ? "xxh3-128 " + DigestHex(f.chunks[0].digest)
                                 : std::to_string(f.chunks.size()) + " chunks" +
                                       (digested < f.bytes ? ", " + FormatBytes(f.bytes - digested) +
                                                                 " of zeros"
                                                           : "");
    std::printf("  %-28s %12llu  %s\n", f.name.c_str(), static_cast<unsigned long long>(f.bytes),
                what.c_str());
  }
  return kExitOk;
}

}  // namespace cusnap::cli
