// libcusnap_criu.so, the CRIU plugin through which `criu dump` / `criu restore` (and every
// container engine that runs them: Podman, CRI-O, containerd, all through runc) checkpoint a
// cusnap job (DESIGN.md, "Containers"). This file owns the plugin's descriptor and its hooks;
// docs/CONTAINERS.md ("How CRIU drives a device plugin") says when CRIU calls each one and in
// which state the tasks are then.
//
// Each hook returns -ENOTSUP, CRIU's "not mine": CRIU calls a hook's plugins in the order it
// loaded them (the plugin directory's readdir order) and stops at the first that answers
// anything else, so answering 0 would keep CRIU's CUDA plugin from the task.
#include <cerrno>
#include <string>

#include "criu_plugin/criu_api.h"

extern "C" {
#include <criu-plugin.h>
}

namespace {

using cusnap::criu_plugin::CriuLog;
using cusnap::criu_plugin::CriuLogLevel;

constexpr const char* kPluginName = "cusnap_criu";

const char* StageName(int stage) {
  switch (stage) {
    case CR_PLUGIN_STAGE__DUMP: return "dump";
    case CR_PLUGIN_STAGE__PRE_DUMP: return "pre-dump";
    case CR_PLUGIN_STAGE__RESTORE: return "restore";
    default: return "unknown stage";
  }
}

void LogHook(const char* hook, int pid) {
  CriuLog(CriuLogLevel::kInfo, std::string(hook) + " pid " + std::to_string(pid));
}

int Init(int stage) {
  if (const std::string missing = cusnap::criu_plugin::ResolveCriuApi(); !missing.empty()) {
    CriuLog(CriuLogLevel::kError, std::string("this criu lacks ") + missing +
                                      ", which the plugin needs (a CRIU older than 4.2?)");
    return -1;
  }
  std::string line = std::string("init ") + StageName(stage);
  if (stage == CR_PLUGIN_STAGE__RESTORE) {
    line += cusnap::criu_plugin::InventoryNames(kPluginName) ? " (the images name this plugin)"
                                                             : " (the images do not name this plugin)";
  }
  CriuLog(CriuLogLevel::kInfo, line);
  return 0;
}

void Exit(int stage, int ret) {
  CriuLog(CriuLogLevel::kInfo, std::string("exit ") + StageName(stage) + " ret " + std::to_string(ret));
}

int PauseDevices(int pid) {
  LogHook("PAUSE_DEVICES", pid);
  return -ENOTSUP;
}

int CheckpointDevices(int pid) {
  LogHook("CHECKPOINT_DEVICES", pid);
  return -ENOTSUP;
}

int PostForking() {
  CriuLog(CriuLogLevel::kInfo, "POST_FORKING");
  return -ENOTSUP;
}

int ResumeDevicesLate(int pid) {
  LogHook("RESUME_DEVICES_LATE", pid);
  return -ENOTSUP;
}

}  // namespace

// CRIU finds the plugin by this one exported symbol (dlsym "CR_PLUGIN_DESC").
extern "C" __attribute__((visibility("default"))) cr_plugin_desc_t CR_PLUGIN_DESC;
CR_PLUGIN_REGISTER(kPluginName, Init, Exit)

CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, PauseDevices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, CheckpointDevices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__POST_FORKING, PostForking)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, ResumeDevicesLate)
