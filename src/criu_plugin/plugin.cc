// libcusnap_criu.so, the CRIU plugin through which `criu dump` / `criu restore` (and every
// container engine that runs them: Podman, CRI-O, containerd, all through runc) checkpoint a
// cusnap job (DESIGN.md, "Containers"). This file owns the plugin's descriptor and its hooks;
// docs/CONTAINERS.md ("How CRIU drives a device plugin") says when CRIU calls each one and in
// which state the tasks are then. The work is cusnap's own sequences, run as `cusnap
// criu-plugin <action>` (cusnap_call.h):
//
//   init (dump)          the whole job checkpointed while every task still runs (CRIU has
//                        neither frozen nor seized anything yet, whatever the order in which
//                        it loaded its plugins); a refusal fails the dump, the job untouched
//   PAUSE_DEVICES,
//   CHECKPOINT_DEVICES   nothing left to do: -ENOTSUP, so that CRIU's CUDA plugin, when
//                        installed too, asks each participant and finds it checkpointed;
//                        -1 (the dump fails) for a participant that exited since
//   exit (dump)          the manifest, or the failed dump removed; a watch started at init
//                        restores the job in place once CRIU ends, if its processes are
//                        still there (a failure, --leave-running)
//   init (restore)       the images checked before CRIU restores anything
//   RESUME_DEVICES_LATE  0 for a participant (its GPU state is cusnap's to restore), the
//                        tasks are still stopped: nothing can be asked of them yet
//   exit (restore)       every restore phase, once CRIU released the tasks
#include <fcntl.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "criu_plugin/criu_api.h"
#include "criu_plugin/cusnap_call.h"
#include "common/unique_fd.h"

extern "C" {
#include <criu-plugin.h>
}

namespace {

using cusnap::criu_plugin::CriuLog;
using cusnap::criu_plugin::CriuLogLevel;

constexpr const char* kPluginName = "cusnap_criu";

/// The job this CRIU run moves: its participants as its own PID namespace numbers them
/// (empty: CRIU's run holds no cusnap job, and the plugin stays out of it).
struct Job {
  /// CRIU's images directory, a copy taken at init: CRIU closes its own before exit.
  cusnap::UniqueFd images;
  std::set<int> participants;
  int root = 0;  ///< restore: the restored tree's root (CRIU's namespace), its first task
};

Job& TheJob() {
  static Job job;
  return job;
}

bool IsParticipant(int pid) {
  return TheJob().participants.contains(cusnap::criu_plugin::InnermostPid(pid));
}

/// Runs `cusnap criu-plugin <args>`; true when it exited 0 (its participants become the
/// job's). A failure is named in CRIU's log.
bool Ask(const std::vector<std::string>& args) {
  const int images = TheJob().images.get();
  if (images < 0) {
    CriuLog(CriuLogLevel::kError, "CRIU has no images directory to give cusnap");
    return false;
  }
  const auto answer = cusnap::criu_plugin::RunCusnap(args, images);
  if (answer.status != 0) {
    CriuLog(CriuLogLevel::kError, "cusnap criu-plugin " + args.front() + " failed (exit " +
                                      std::to_string(answer.status) + ", above)");
    return false;
  }
  TheJob().participants = {answer.participants.begin(), answer.participants.end()};
  return true;
}

/// The fault tests' pause at a hook (as `cusnap`'s at a phase, cli/test_pause.h): when
/// CUSNAP_TEST_PAUSE_AT lists "criu-plugin:<hook>:before", CRIU's log says
/// "cusnap-test-pause: criu-plugin:<hook>:before" and CRIU stops itself (SIGSTOP) until the
/// test, having killed a participant there, continues it; at the hook's first call only. Unset (always, but in tests): nothing.
void MaybePauseForTest(const char* hook) {
  const char* patterns = std::getenv("CUSNAP_TEST_PAUSE_AT");
  if (patterns == nullptr || *patterns == '\0') return;
  const std::string here = std::string("criu-plugin:") + hook + ":before";
  static std::set<std::string> paused;  // once per hook: at its first task
  if (paused.contains(here)) return;
  std::istringstream items(patterns);
  for (std::string item; std::getline(items, item, ',');) {
    if (item != here) continue;
    paused.insert(here);
    CriuLog(CriuLogLevel::kError, "cusnap-test-pause: " + here);
    ::raise(SIGSTOP);
    return;
  }
}

/// The mode of this CRIU run that cannot move a job's GPU memory ("" when none).
std::string UnservedMode(int stage, const cusnap::criu_plugin::CriuRunOptions& o) {
  if (stage == CR_PLUGIN_STAGE__PRE_DUMP) return "pre-dump";
  if (o.track_mem) return "--track-mem";
  if (o.lazy_pages) return "--lazy-pages";
  if (o.stream) return "--stream";
  return "";
}

int InitDump(int stage) {
  const auto options = cusnap::criu_plugin::ReadRunOptions();
  std::vector<std::string> args = {"dump", "--pid", std::to_string(options.tree_id),
                                   "--criu-version",
                                   std::string("Version: ") + cusnap::criu_plugin::BuiltForCriuVersion()};
  if (const std::string mode = UnservedMode(stage, options); !mode.empty()) {
    args.insert(args.end(), {"--criu-mode", mode});
  }
  if (!Ask(args)) return -1;
  if (TheJob().participants.empty()) {
    CriuLog(CriuLogLevel::kInfo, "pid " + std::to_string(options.tree_id) +
                                     "'s tree holds no cusnap participant: left to CRIU");
    return 0;
  }
  if (!cusnap::criu_plugin::AddToInventory(kPluginName)) {
    CriuLog(CriuLogLevel::kError, "CRIU did not take the plugin into the images' inventory");
    return -1;
  }
  return 0;
}

int InitRestore() {
  if (!cusnap::criu_plugin::InventoryNames(kPluginName)) {
    CriuLog(CriuLogLevel::kInfo, "the images hold no cusnap job: nothing to do here");
    return 0;
  }
  std::vector<std::string> args = {"check"};
  if (const char* map = std::getenv("CUSNAP_DEVICE_MAP"); map != nullptr && *map != '\0') {
    args.insert(args.end(), {"--device-map", map});
  }
  return Ask(args) ? 0 : -1;
}

int Init(int stage) {
  // `cusnap dump` and `restore --images-dir` run CRIU themselves (coordinator/images/criu.h,
  // kCusnapRunsCriuVariable).
  if (std::getenv("CUSNAP_DUMP_RUNS_CRIU") != nullptr) {
    CriuLog(CriuLogLevel::kInfo, "this criu runs for cusnap itself: nothing to do here");
    return 0;
  }
  if (const std::string problem = cusnap::criu_plugin::ResolveCriuApi(); !problem.empty()) {
    CriuLog(CriuLogLevel::kError, problem);
    return -1;
  }
  if (const int images = cusnap::criu_plugin::ImagesDirFd(); images >= 0) {
    TheJob().images.reset(::fcntl(images, F_DUPFD_CLOEXEC, 0));
  }
  return stage == CR_PLUGIN_STAGE__RESTORE ? InitRestore() : InitDump(stage);
}

void Exit(int stage, int ret) {
  if (TheJob().participants.empty()) return;
  if (stage == CR_PLUGIN_STAGE__DUMP) {
    MaybePauseForTest("dump-end");
    (void)Ask({"dump-end", "--criu-ret", std::to_string(ret)});
  } else if (stage == CR_PLUGIN_STAGE__RESTORE && ret == 0 && TheJob().root > 0) {
    MaybePauseForTest("restore-end");
    std::vector<std::string> args = {"restore", "--pid", std::to_string(TheJob().root)};
    if (const char* map = std::getenv("CUSNAP_DEVICE_MAP"); map != nullptr && *map != '\0') {
      args.insert(args.end(), {"--device-map", map});
    }
    if (!Ask(args)) {
      CriuLog(CriuLogLevel::kError, "the job's processes are back but its GPU state is not: "
                                    "'cusnap recover --pid " + std::to_string(TheJob().root) +
                                    "' finishes the restore");
    }
  }
}

/// -1, named in CRIU's log, when participant `pid` has exited since cusnap checkpointed the
/// job: CRIU would dump a job without it (a zombie it takes as it is). The dump fails, and
/// the job's survivors are restored in place once CRIU ends (the watch).
int FailIfExited(int pid) {
  if (!cusnap::criu_plugin::HasExited(pid)) return 0;
  CriuLog(CriuLogLevel::kError, "pid " + std::to_string(pid) + " (pid " +
                                    std::to_string(cusnap::criu_plugin::InnermostPid(pid)) +
                                    " of the job), a cusnap participant, exited after cusnap "
                                    "checkpointed the job: the dump fails; the job's other "
                                    "processes are restored in place once CRIU ends");
  return -1;
}

int PauseDevices(int pid) {
  if (!IsParticipant(pid)) return -ENOTSUP;
  MaybePauseForTest("pause-devices");
  if (FailIfExited(pid) != 0) return -1;
  CriuLog(CriuLogLevel::kInfo, "pid " + std::to_string(pid) + ": checkpointed by cusnap");
  return -ENOTSUP;
}

/// Every task is seized now: a participant killed since its PAUSE_DEVICES is a zombie here.
int CheckpointDevices(int pid) {
  if (IsParticipant(pid) && FailIfExited(pid) != 0) return -1;
  return -ENOTSUP;
}

int ResumeDevicesLate(int pid) {
  if (TheJob().participants.empty()) return -ENOTSUP;
  if (TheJob().root == 0) TheJob().root = pid;  // CRIU calls the tree's root first
  if (IsParticipant(pid)) MaybePauseForTest("resume-devices-late");
  return IsParticipant(pid) ? 0 : -ENOTSUP;
}

}  // namespace

// CRIU finds the plugin by this one exported symbol (dlsym "CR_PLUGIN_DESC").
extern "C" __attribute__((visibility("default"))) cr_plugin_desc_t CR_PLUGIN_DESC;
CR_PLUGIN_REGISTER(kPluginName, Init, Exit)

CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, PauseDevices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, CheckpointDevices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, ResumeDevicesLate)
