// `cusnap criu-plugin <action>`: what libcusnap_criu.so (src/criu_plugin) runs from CRIU's
// hooks, so that a `criu dump` / `criu restore` run by anyone (a container engine through
// runc, or a person) does what `cusnap dump` / `cusnap restore --images-dir` do, with the same
// sequences (coordinator/sequences/dump.h). CRIU's images directory comes as
// /proc/self/fd/<n>, a descriptor the plugin hands down: it stays valid in the job's mount
// namespace, which the command joins when the job runs in a container.
//
//   dump      the plugin's init (dump): the job under --pid checkpointed, its carriers and
//             pending manifest in the images directory; a watch waits for CRIU to end and
//             restores the job in place if its processes are still there (CRIU failed, was
//             killed, or left them running)
//   dump-end  the plugin's exit (dump): the manifest (CRIU succeeded) or the failed dump
//             removed
//   check     the plugin's init (restore): the images checked before CRIU restores anything
//   restore   the plugin's exit (restore): every restore phase on what CRIU brought back
#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/pid_namespace.h"
#include "cli/version.h"
#include "common/ids.h"
#include "common/unique_fd.h"
#include "coordinator/images/carrier_files.h"
#include "coordinator/images/manifest.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/participants/lease.h"
#include "coordinator/proc/processes.h"
#include "coordinator/record/state_file.h"
#include "coordinator/sequences/dump.h"

namespace cusnap::cli {
namespace {

constexpr const char* kCommand = "criu-plugin";

/// The processes of `root`'s tree with the shim loaded (this PID namespace's pids).
std::vector<int> ShimProcessesUnder(int root) {
  std::vector<int> found;
  for (const int pid : coord::ProcessTree(root)) {
    if (!coord::MappedShimPath(pid).empty()) found.push_back(pid);
  }
  return found;
}

/// The plugin reads the participants from the last stdout line: "participants: 12 14".
void PrintParticipants(const std::vector<int>& pids) {
  std::printf("participants:");
  for (const int pid : pids) std::printf(" %d", pid);
  std::printf("\n");
}

/// The job's endpoints are where its shims keep them (in a container: the container's own
/// control directory, whatever this command's environment says).
void UseShimControlDirOf(const std::vector<int>& shims) {
  for (const int pid : shims) {
    if (const auto dir = coord::ShimControlDir(pid)) {
      ::setenv("CUSNAP_CONTROL_DIR", dir->c_str(), 1);
      return;
    }
  }
}

/// The dump's checkpoint, run in the job's PID and mount namespaces (pid `root` there).
int CheckpointForCriu(const CriuPluginArgs& args, int root) {
  const std::vector<int> shims = ShimProcessesUnder(root);
  if (shims.empty()) {
    PrintParticipants({});
    return kExitOk;  // not a cusnap job: left to CRIU (and to CRIU's CUDA plugin)
  }
  if (!args.criu_mode.empty()) {
    return EndRefused(kCommand, false,
                      "criu " + args.criu_mode + " cannot take a cusnap job (pid " +
                          std::to_string(root) + " and its tree hold " +
                          std::to_string(shims.size()) + " cusnap participants): its GPU memory "
                          "is moved only by a full dump (criu dump, without --lazy-pages, "
                          "--track-mem or --stream)",
                      kExitRefused);
  }
  UseShimControlDirOf(shims);
  coord::DumpOptions options;
  options.checkpoint = coord::CheckpointOptions{args.images_dir, 0, "--pid " + std::to_string(root)};
  options.checkpoint.lease_ms = coord::LeaseMsFromEnvironment();
  options.checkpoint.images_root = root;
  options.root_pid = root;
  options.control_dir = ControlDir();
  // Run inside the job's namespace (a container's), this /proc shows one level only: a root
  // numbered otherwise than CRIU numbers it runs in a namespace of its own too.
  options.own_pid_namespace = root != args.pid || coord::NamespacePids(root).size() > 1;
  options.cusnap_version = CliBuildInfo();
  options.caller_criu_version = args.criu_version;
  const int rc = Drive("dump", Target{root, false}, false, coord::kDumpPhaseCount, kExitRefused,
                       [&](const coord::Discoverer& d, coord::CheckpointDriver& drv,
                           coord::PhaseObserver& o, coord::Interrupt& i) {
                         return coord::Dump(options, d, drv, o, &i);
                       });
  if (rc == kExitOk) PrintParticipants(shims);
  return rc;
}

/// A folder of its own that holds what an in-place restore of the job reads: a copy of the
/// state file, and the carrier files of `images_dir` (write_carriers gave their memory back),
/// hard links on the images directory's filesystem (beside it) where it can, copies elsewhere: a failed
/// dump removes them from the images directory, and a container engine removes or archives
/// that one. "" when it cannot be made.
std::string ResumeFolderBeside(const std::string& images_dir) {
  std::error_code ec;
  const auto real = std::filesystem::canonical(images_dir, ec);
  std::string folder = ((ec ? std::filesystem::temp_directory_path() : real.parent_path()) /
                        ".cusnap-resume.XXXXXX").string();
  if (::mkdtemp(folder.data()) == nullptr) {
    folder = (std::filesystem::temp_directory_path() / "cusnap-resume.XXXXXX").string();
    if (::mkdtemp(folder.data()) == nullptr) return "";
  }
  for (const auto& e : std::filesystem::directory_iterator(images_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != coord::kStateFileName && !coord::IsCarrierFile(name)) continue;
    const std::string to = folder + "/" + name;
    // The state file is copied: cusnap reads no state file with a second link.
    const bool state = name == coord::kStateFileName;
    if ((state || ::link(e.path().c_str(), to.c_str()) != 0) &&
        !std::filesystem::copy_file(e.path(), to, ec)) {
      std::filesystem::remove_all(folder, ec);
      return "";
    }
  }
  return folder;
}

/// Waits (in a process of its own, detached from CRIU and outside the job's namespaces, so
/// that CRIU neither dumps it nor waits for it) for the CRIU that called the plugin to end;
/// then, when a process of the job still runs (CRIU failed, was killed, or left the job
/// running), restores the job in place with `cusnap restore --pid` of the first of `job` (the
/// root first, then its participants) still running, from ResumeFolderBeside's folder: a
/// killed root must not strand the others. Its output goes to resume.log there; the folder is
/// removed once the restore succeeded or the job is gone.
void WatchCriuThenResume(const std::string& images_dir, const std::vector<int>& job) {
  const int criu_pid = ::getppid();
  UniqueFd criu(static_cast<int>(::syscall(SYS_pidfd_open, criu_pid, 0)));
  const int root = job.front();
  std::vector<uint64_t> started;
  for (const int pid : job) started.push_back(KernelStartTime(pid));
  std::string folder = ResumeFolderBeside(images_dir);
  if (!criu.valid() || started.front() == 0 || folder.empty()) {
    std::fprintf(stderr, "cusnap %s: cannot watch CRIU (pid %d): should it fail, run 'cusnap "
                 "restore --pid %d --state-dir %s' to resume the job in place\n", kCommand,
                 criu_pid, root, images_dir.c_str());
    return;
  }
  std::error_code ec;
  std::printf("resume watch: if CRIU fails or leaves the job running, cusnap restores it in "
              "place once CRIU ends (log: %s/resume.log)\n", folder.c_str());
  std::fflush(nullptr);
  const pid_t first = ::fork();
  if (first != 0) {
    if (first > 0) ::waitpid(first, nullptr, 0);
    return;
  }
  ::setsid();
  if (::fork() != 0) ::_exit(0);
  const int log = ::open((folder + "/resume.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(log, STDOUT_FILENO);
  ::dup2(log, STDERR_FILENO);
  pollfd ended{criu.get(), POLLIN, 0};
  while (::poll(&ended, 1, -1) < 0 && errno == EINTR) {
  }
  int rc = kExitOk;
  // A zombie is a process CRIU ended (its parent has not reaped it yet): nothing to restore.
  int running = 0;
  for (size_t i = 0; i < job.size() && running == 0; ++i) {
    if (started[i] != 0 && KernelStartTime(job[i]) == started[i] && !coord::IsZombie(job[i])) {
      running = job[i];
    }
  }
  if (running != 0) {
    std::printf("CRIU (pid %d) ended with the job still running: restoring it in place "
                "(--pid %d)\n", criu_pid, running);
    std::fflush(nullptr);
    const std::string pid = std::to_string(running);
    // Handed down as a descriptor: the restore runs in the job's mount namespace (a
    // container's), where this machine's path of the folder need not exist.
    const int folder_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
    const std::string state_dir =
        folder_fd >= 0 ? "/proc/self/fd/" + std::to_string(folder_fd) : folder;
    const pid_t restore = ::fork();
    if (restore == 0) {
      ::execl("/proc/self/exe", "cusnap", "restore", "--pid", pid.c_str(), "--state-dir",
              state_dir.c_str(), static_cast<char*>(nullptr));
      ::_exit(kExitError);
    }
    rc = ExitStatusOf(restore);
  }
  if (rc == kExitOk) std::filesystem::remove_all(folder, ec);
  ::_exit(rc);
}

int Dump(const CriuPluginArgs& args) {
  // CRIU seizes and freezes the job's processes next: a job held stopped would meet it
  // stopped inside a frozen cgroup, where CRIU's ptrace attach waits for ever.
  ::setenv("CUSNAP_HOLD", "run", 1);
  const int rc = InPidNamespaceOf(kCommand, args.pid, [&](int root) {
    return CheckpointForCriu(args, root);
  });
  if (rc == kExitOk && ::access(coord::StateFilePath(args.images_dir).c_str(), F_OK) == 0) {
    // The watch's `cusnap restore` finds the job's endpoints where its shims keep them, not
    // where CRIU's caller's environment says (runc hands CRIU no CUSNAP_CONTROL_DIR).
    std::vector<int> job = ShimProcessesUnder(args.pid);
    UseShimControlDirOf(job);
    std::erase(job, args.pid);
    job.insert(job.begin(), args.pid);
    WatchCriuThenResume(args.images_dir, job);
  }
  return rc;
}

int DumpEnd(const CriuPluginArgs& args) {
  if (args.criu_ret == 0) {
    if (Status s = coord::CompleteDumpByCriu(args.images_dir); !s) {
      std::fprintf(stderr, "cusnap %s: CRIU finished the dump but its manifest cannot be "
                   "written: %s; the images cannot be restored by the plugin\n", kCommand,
                   s.error().message.c_str());
      return kExitFailedAfterChange;
    }
    std::printf("dump-end: the manifest lists every image file\n");
    return kExitOk;
  }
  for (const std::string& left : coord::DiscardFailedDump(args.images_dir)) {
    std::fprintf(stderr, "cusnap %s: %s\n", kCommand, left.c_str());
  }
  std::printf("dump-end: CRIU failed (%d): the dump was removed; the job is restored in place "
              "once CRIU ends\n", args.criu_ret);
  return kExitOk;
}

/// check and restore: the images restore's sequence (check_only, or on the tree CRIU
/// brought back, root pid `criu_restored_root` in this PID namespace).
int RestoreForCriu(const CriuPluginArgs& args, bool check_only, int criu_restored_root) {
  coord::ImagesRestoreOptions options;
  options.images_dir = args.images_dir;
  options.lease_ms = coord::LeaseMsFromEnvironment();
  options.check_only = check_only;
  options.criu_restored_root = criu_restored_root;
  if (!ParseDeviceMapArg("restore", args.device_map, options.device_map)) return kExitUsage;
  if (criu_restored_root > 0) UseShimControlDirOf(ShimProcessesUnder(criu_restored_root));
  options.control_dir = ControlDir();
  options.discoverer_for = [](int root) {
    return coord::EndpointDiscoverer(coord::DiscoveryOptions{ControlDir(), root, false});
  };
  return Drive("restore", Target{}, false, coord::kImagesRestorePhaseCount, kExitRestoreRefused,
               [&](const coord::Discoverer&, coord::CheckpointDriver& drv,
                   coord::PhaseObserver& o, coord::Interrupt& i) {
                 return coord::RestoreImages(options, drv, o, &i);
               });
}

int Check(const CriuPluginArgs& args) {
  auto manifest = coord::ReadManifest(args.images_dir);
  if (!manifest) {
    // Images CRIU wrote without a cusnap job in them (no manifest, no state file): not ours.
    if (::access(coord::StateFilePath(args.images_dir).c_str(), F_OK) != 0) {
      PrintParticipants({});
      return kExitOk;
    }
    return EndRefused(kCommand, false, manifest.error().message, kExitRestoreRefused);
  }
  const int rc = RestoreForCriu(args, true, 0);
  std::vector<int> pids;
  for (const auto& p : manifest->participants) pids.push_back(p.pid);
  if (rc == kExitOk) PrintParticipants(pids);
  return rc;
}

int Restore(const CriuPluginArgs& args) {
  return InPidNamespaceOf(kCommand, args.pid, [&](int root) {
    return RestoreForCriu(args, false, root);
  });
}

}  // namespace

int CriuPluginCommand(const CriuPluginArgs& args) {
  if (args.action == "dump") return Dump(args);
  if (args.action == "dump-end") return DumpEnd(args);
  if (args.action == "check") return Check(args);
  if (args.action == "restore") return Restore(args);
  std::fprintf(stderr, "cusnap %s: unknown action '%s' (dump, dump-end, check, restore)\n",
               kCommand, args.action.c_str());
  return kExitUsage;
}

}  // namespace cusnap::cli
