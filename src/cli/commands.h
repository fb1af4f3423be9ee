// The `cusnap` subcommands. Each returns the process exit status (exit_codes.h).
#pragma once

#include <string>
#include <vector>

namespace cusnap::cli {

/// Where participants come from, as given on the command line.
struct Target {
  int pid = 0;
  bool all = false;
  /// The command works inside the job's own PID namespace (main.cc joined it; `pid` is the
  /// job's pid there).
  bool in_job_namespace = false;
};

/// `run [--pid-namespace] [--] cmd...`: LD_PRELOAD the shim (prepended), put the simulated
/// driver on LD_LIBRARY_PATH when it is the chosen driver, exec `command`. Returns only on
/// failure. With `pid_namespace`, `command` runs in a PID namespace of its own
/// (RunInNewPidNamespace) as the pid this process has here, with its endpoints in a control
/// directory of its own below ours (JobControlDir); returns its exit status.
int RunCommand(const std::vector<std::string>& command, bool pid_namespace = false);

/// `checkpoint`: suspends the job (coordinator.h, Checkpoint).
int CheckpointCommand(const Target& target, const std::string& state_dir,
                      unsigned lock_timeout_ms, bool json);

/// `restore`: resumes a checkpointed job (coordinator.h, Restore).
int RestoreCommand(const Target& target, const std::string& state_dir,
                   const std::string& device_map, bool json);

/// `recover`: finishes what an interrupted or failed checkpoint or restore left (coordinator.h,
/// Recover): exit 0 when every survivor is active with its bytes.
int RecoverCommand(const Target& target, const std::string& state_dir,
                   const std::string& device_map, bool json);

/// `status`: participants, phase, allocations, bytes, failure text, each one's shim build;
/// stale endpoint sockets listed, and removed when `prune`.
int StatusCommand(const Target& target, bool json, bool prune);

/// What `dump` was asked for.
struct DumpArgs {
  int pid = 0;
  std::string images_dir;
  bool leave_running = false;
  bool json = false;
  bool in_job_namespace = false;  ///< the job runs in a PID namespace of its own (Target's)
};

/// `dump --pid P --images-dir D [--leave-running]`: checkpoint, then CRIU writes the job's
/// tree into D with a manifest (coordinator/sequences/dump.h). Exit 3 refused (nothing changed).
int DumpCommand(const DumpArgs& args);

/// `criu-plugin <action>`: what libcusnap_criu.so runs from CRIU's hooks (cli/criu_plugin.cc).
struct CriuPluginArgs {
  std::string action;        ///< dump, dump-end, check, restore
  int pid = 0;               ///< dump, restore: the tree's root, as CRIU's PID namespace numbers it
  std::string images_dir;    ///< CRIU's images directory (/proc/self/fd/<n>)
  std::string criu_version;  ///< dump: CRIU's version line, for the manifest
  std::string criu_mode;     ///< dump: a CRIU mode a job cannot take (pre-dump, lazy-pages, ...)
  int criu_ret = 0;          ///< dump-end: the dump's result
  std::string device_map;    ///< check, restore: as restore --device-map
};

/// Runs one `criu-plugin` action; the last stdout line of dump and check names the job's
/// participants ("participants: <pid>..." as the job's PID namespace numbers them; none: a
/// tree without cusnap, which the plugin leaves alone). Exit codes as the commands they stand
/// for: 3 (dump) and 5 (check) refused, nothing changed.
int CriuPluginCommand(const CriuPluginArgs& args);

/// `restore --images-dir D [--device-map M] [--pid-namespace]`: checks D, CRIU brings the
/// tree back, then every restore phase (coordinator/sequences/dump.h). In a PID namespace of its own
/// (cli/pid_namespace.h) when `pid_namespace` is set or a pid of the dump is held by another
/// process here. Exit 5 refused (nothing changed).
int RestoreImagesCommand(const std::string& images_dir, const std::string& device_map, bool json,
                         bool pid_namespace);

/// `inspect D` for an images directory: its manifest (and the state file's summary); for a
/// dump interrupted after CRIU ran (a pending manifest only), what it is and whether
/// `restore --images-dir` can complete it. kExitError when neither can be read.
int InspectImagesCommand(const std::string& images_dir, bool json);

/// `inspect <state dir>`: what a checkpoint recorded. `state_dir` may also be the state file
/// itself (its cusnap-state.json path).
int InspectCommand(const std::string& state_dir, bool json);

/// What `demo` was asked for.
struct DemoOptions {
  std::string sizes;  ///< "2M,64M,256M"; empty: the driver's default sizes
  bool json = false;
};

/// `demo`: a creator and an importer sharing three allocations, checkpointed, restored and
/// verified (demo.cc). kExitOk only when every check passed.
int DemoCommand(const DemoOptions& options);

/// Directory holding the running `cusnap` binary (/proc/self/exe).
std::string SelfDir();

/// The state directory: `given`, else $CUSNAP_STATE_DIR, else ./cusnap-state.
std::string StateDir(const std::string& given);

}  // namespace cusnap::cli
