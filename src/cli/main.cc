// `cusnap`: command-line parsing (CLI11) and dispatch to the subcommands (commands.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string_view>

#include "cli/checks.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/exit_codes.h"
#include "cli/pid_namespace.h"
#include "cli/usage.h"
#include "cli/version.h"
#include "coordinator/images/manifest.h"

namespace {

using cusnap::cli::Target;

/// --device-map's help, for restore and recover.
constexpr const char* kDeviceMapHelp =
    "restore onto other GPUs: OLD=NEW pairs of GPU indices or UUIDs, e.g. 0=1,1=0 or "
    "GPU-<uuid>=GPU-<uuid>; an index is the GPU's place in PCI bus order, the index "
    "nvidia-smi prints, never an ordinal of a process's or this shell's "
    "CUDA_VISIBLE_DEVICES; the map must be one-to-one over every GPU the job uses";

/// `run(target)` for `--pid`, in the target's PID namespace when it runs in another one
/// (cli/pid_namespace.h), with the pid it has there; `--all` and no target run here.
int InNamespace(const char* command, const Target& target,
                const std::function<int(const Target&)>& run) {
  // A job `cusnap run --pid-namespace` started: named by the `cusnap run` or by its own pid
  // here, with its endpoints in a control directory of its own.
  const int root = target.pid > 0 ? cusnap::cli::JobRootUnder(target.pid) : target.pid;
  if (root > 0) cusnap::cli::AdoptJobControlDir(root);
  return cusnap::cli::InPidNamespaceOf(command, root, [&](int pid) {
    Target there = target;
    there.pid = pid;
    there.in_job_namespace = pid != root;  // joined: the job's pid there is another number
    return run(there);
  });
}

/// A directory given relative to the working directory, made absolute (CRIU runs in the
/// images directory: a relative path given to it names another place; found by a fresh user:
/// `restore --images-dir D` with a relative D failed at criu_restore).
const CLI::Validator kAbsolutePath(
    [](std::string& path) {
      if (!path.empty()) {
        std::error_code ec;
        const auto absolute = std::filesystem::absolute(path, ec);
        if (!ec) path = absolute.lexically_normal().string();
      }
      return std::string();
    },
    "", "absolute path");

/// --device-map given with nothing in it (`--device-map ''`, an unset variable): a usage
/// error, not "no map" (a restore would silently stay on the old GPUs).
const CLI::Validator kNonEmptyDeviceMap(
    [](std::string& text) {
      return text.empty() ? std::string("--device-map is empty: give OLD=NEW pairs, e.g. "
                                        "0=1,1=0, or leave the option out")
                          : std::string();
    },
    "", "non-empty device map");

/// Adds --pid / --all to `cmd`: exactly one of them when `required`, else at most one, and
/// `neither` says what the command does with neither.
void AddTarget(CLI::App* cmd, Target& target, bool required, const std::string& neither = "") {
  auto* group = cmd->add_option_group(
      "target", required ? "which processes (exactly one of)"
                         : "which processes (at most one of; neither: " + neither + ")");
  group->add_option("--pid", target.pid, "the job's process: its whole process tree")
      ->check(cusnap::cli::PidValidator());
  group->add_flag("--all", target.all, "every live endpoint in the control directory");
  if (required) {
    group->require_option(1);
  } else {
    group->require_option(0, 1);
  }
}

/// `cusnap --version`: this program's build, and the shim `cusnap run` would preload.
std::string VersionText() {
  const std::string shim = cusnap::cli::ShimPath();
  std::string info = cusnap::cli::ShimBuildInfoInFile(shim);
  if (info.empty()) info = "missing or unreadable";
  return cusnap::cli::CliBuildInfo() + "\nshim " + shim + ": " + info;
}

/// Refuses `--pid 1` (init: its process tree is every process of the machine) and an
/// `--state-dir` given empty, before anything is done. kExitOk when both are fine.
int CheckTargetArgs(const char* command, const Target& target, const CLI::App* cmd,
                    const std::string& state_dir) {
  if (target.pid == 1) {
    std::fprintf(stderr, "cusnap %s: --pid 1 is init: its process tree is every process of "
                 "the machine; give the job's own pid%s\n", command,
                 std::string_view(command) == "dump" ? "" : ", or --all for every endpoint in "
                                                         "the control directory");
    return cusnap::cli::kExitUsage;
  }
  if (cmd->count("--state-dir") > 0 && state_dir.empty()) {
    std::fprintf(stderr, "cusnap %s: --state-dir is empty; give a directory (left out: "
                 "$CUSNAP_STATE_DIR, else ./cusnap-state)\n", command);
    return cusnap::cli::kExitUsage;
  }
  return cusnap::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // `cusnap run -- COMMAND...`: everything after "--" is the command, untouched (CLI11 2.1
  // would try to parse it as extra arguments of the parent).
  if (const std::string problem = cusnap::cli::CheckEnvironment(); !problem.empty()) {
    std::fprintf(stderr, "cusnap: %s\n", problem.c_str());
    return cusnap::cli::kExitUsage;
  }
  if (argc >= 3 && std::string_view(argv[1]) == "run") {
    const bool pid_namespace = std::string_view(argv[2]) == "--pid-namespace";
    const int dashes = pid_namespace ? 3 : 2;
    if (argc > dashes && std::string_view(argv[dashes]) == "--") {
      if (argc == dashes + 1) {
        std::fprintf(stderr, "cusnap run: no command given\nUsage: cusnap run [--pid-namespace] "
                             "[--] COMMAND [ARGS...]\n");
        return cusnap::cli::kExitUsage;
      }
      return cusnap::cli::RunCommand(std::vector<std::string>(argv + dashes + 1, argv + argc),
                                     pid_namespace);
    }
  }
  CLI::App app{"cusnap: checkpoint and restore of multi-process CUDA jobs that share GPU memory"};
  app.footer(cusnap::cli::AllExitCodesHelp());
  app.require_subcommand(1);
  // A callback: the shim file is read only when --version is asked (reading it at every start
  // cost each command 3 s under AddressSanitizer).
  app.set_version_flag("--version", std::function<std::string()>(VersionText),
                       "print the versions of cusnap and its shim");

  std::vector<std::string> run_args;
  bool run_pid_namespace = false;
  auto* run = app.add_subcommand("run", "start a command with the cusnap shim preloaded");
  run->prefix_command();
  run->add_flag("--pid-namespace", run_pid_namespace,
                "start the command in a PID namespace of its own, as a container would: its "
                "root's pid there is this cusnap's pid here, and a `restore --images-dir` of "
                "it never meets pids other processes hold (needs CAP_SYS_ADMIN)");
  run->footer("Usage: cusnap run [--pid-namespace] [--] COMMAND [ARGS...]; LD_PRELOAD gets the "
              "shim prepended.\n"
              "Exit status: the command's own (it replaces cusnap: 127 when the program is "
              "not found, 126 when it is found but cannot be executed, 128+N when signal N "
              "ends it); 2 for a usage error or a control directory it must not use, before it "
              "starts; 1 when the shim is missing or, "
              "with --pid-namespace, no PID namespace can be made.");

  Target ck_target;
  std::string ck_state_dir;
  unsigned lock_timeout_ms = 0;
  bool ck_json = false;
  auto* checkpoint = app.add_subcommand("checkpoint", "suspend a job: GPU memory freed, job parked");
  AddTarget(checkpoint, ck_target, true);
  checkpoint->add_option("--state-dir", ck_state_dir,
                         "where the state file goes (default $CUSNAP_STATE_DIR, else ./cusnap-state)");
  checkpoint->add_option("--lock-timeout-ms", lock_timeout_ms,
                         "cuCheckpointProcessLock timeout in ms (0: none)");
  checkpoint->add_flag("--json", ck_json, "print one JSON document instead of lines");

  Target rs_target;
  std::string rs_state_dir, device_map, rs_images_dir;
  bool rs_json = false;
  auto* restore = app.add_subcommand("restore", "resume a checkpointed job, or bring a dumped "
                                                "one back from its images (--images-dir)");
  AddTarget(restore, rs_target, false, "--images-dir, the job of a dump");
  restore->add_option("--images-dir", rs_images_dir,
                      "restore the job `cusnap dump` wrote there, in new processes (CRIU); "
                      "no --pid, --all or --state-dir then")
      ->transform(kAbsolutePath);
  restore->add_option("--state-dir", rs_state_dir,
                      "where the state file is (default $CUSNAP_STATE_DIR, else ./cusnap-state)");
  restore->add_option("--device-map", device_map, kDeviceMapHelp)->check(kNonEmptyDeviceMap);
  restore->add_flag("--json", rs_json, "print one JSON document instead of lines");
  bool rs_pid_namespace = false;
  restore->add_flag("--pid-namespace", rs_pid_namespace,
                    "with --images-dir: restore the job in a PID namespace of its own, where "
                    "it keeps its pids whatever holds them here (done without asking when a "
                    "pid of the dump is taken); later commands name it by any of its pids as "
                    "this machine numbers them");

  cusnap::cli::DumpArgs dump_args;
  auto* dump = app.add_subcommand(
      "dump", "checkpoint a job to disk: checkpoint, then CRIU writes its process tree and a "
              "manifest into --images-dir; the processes are gone (or run on with "
              "--leave-running); 'restore --images-dir' brings it back");
  dump->add_option("--pid", dump_args.pid, "the job's root process: its whole process tree")
      ->required()
      ->check(cusnap::cli::PidValidator());
  dump->add_option("--images-dir", dump_args.images_dir, "where the images go")
      ->required()
      ->transform(kAbsolutePath);
  dump->add_flag("--leave-running", dump_args.leave_running,
                 "resume the job in place after the dump");
  dump->add_flag("--json", dump_args.json, "print one JSON document instead of lines");

  Target rc_target;
  std::string rc_state_dir, rc_device_map;
  bool rc_json = false;
  auto* recover = app.add_subcommand(
      "recover", "finish what an interrupted or failed checkpoint or restore left: roll every "
                 "participant back to active before the point of no return, forward after it");
  AddTarget(recover, rc_target, true);
  recover->add_option("--state-dir", rc_state_dir,
                      "the checkpoint's state directory, to verify a roll forward against "
                      "(default $CUSNAP_STATE_DIR, else ./cusnap-state; missing: not verified)");
  recover->add_option("--device-map", rc_device_map,
                      std::string(kDeviceMapHelp) + "; used when the roll forward still has "
                      "to restore natively (give the interrupted restore's map)")
      ->check(kNonEmptyDeviceMap);
  recover->add_flag("--json", rc_json, "print one JSON document instead of lines");

  Target st_target;
  bool st_json = false, st_prune = false;
  auto* status = app.add_subcommand("status", "participants, phase, allocations, bytes");
  AddTarget(status, st_target, false, "every endpoint in the control directory");
  status->add_flag("--json", st_json, "print one JSON document");
  status->add_flag("--prune", st_prune,
                   "remove stale endpoint sockets (their process is gone, or its pid was "
                   "reused), the hold markers of processes that ended while held and the "
                   "start-time aliases of restored processes that ended; never a live one");

  std::string inspect_dir;
  bool in_json = false;
  auto* inspect = app.add_subcommand("inspect", "show what a checkpoint recorded");
  inspect->add_option("state_dir", inspect_dir,
                      "the checkpoint's state directory, or its cusnap-state.json (default "
                      "$CUSNAP_STATE_DIR, else ./cusnap-state)");
  inspect->add_flag("--json", in_json, "print the state file as one JSON document");

  cusnap::cli::DemoOptions demo_options;
  auto* demo = app.add_subcommand("demo", "two-process sharing demo: checkpoint + restore + verify");
  demo->add_option("--sizes", demo_options.sizes,
                   "the three allocation sizes, multiples of 2M (default 2M,64M,256M on the "
                   "simulated driver, 64M,1G,2G on GPUs)");
  demo->add_flag("--json", demo_options.json, "print the summary as one JSON document");

  std::string shell;
  // Each command's --help names only the statuses it can end with.
  {
    using namespace cusnap::cli;
    checkpoint->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage, kExitRefused, kExitFailedAfterChange, 130}));
    dump->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage, kExitRefused, kExitFailedAfterChange, 130}));
    restore->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage, kExitFailedAfterChange, kExitRestoreRefused, 130}));
    recover->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage, kExitFailedAfterChange, kExitRestoreRefused, 130}));
    status->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
    inspect->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
    demo->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
  }

  auto* completion = app.add_subcommand("completion", "print a shell completion script");
  completion->footer(cusnap::cli::ExitCodesHelp({cusnap::cli::kExitOk, cusnap::cli::kExitUsage}));
  completion->add_option("shell", shell, "the shell (bash)")
      ->required()
      ->check(CLI::IsMember(cusnap::cli::kCompletionShells));

  const std::string word = cusnap::cli::CommandWord(argc, argv);
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_name().empty(); })) {
    commands.push_back(sub->get_name());
  }
  if (const std::string unknown = cusnap::cli::UnknownCommand(word, commands); !unknown.empty()) {
    std::fprintf(stderr, "cusnap: %s\n", unknown.c_str());
    return cusnap::cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --json anywhere before the job's own arguments asks for a JSON answer, a usage error's too.
    bool json = false;
    for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
      json |= std::string_view(argv[i]) == "--json";
    }
    return cusnap::cli::ReportParseError(app, word, e, json);
  }

  if (*run) {
    run_args = run->remaining();
    if (run_args.empty()) {
      std::fprintf(stderr, "cusnap run: no command given\nUsage: cusnap run [--pid-namespace] "
                           "[--] COMMAND [ARGS...]\n");
      return cusnap::cli::kExitUsage;
    }
    if (run_args.front() == "--") run_args.erase(run_args.begin());
    return cusnap::cli::RunCommand(run_args, run_pid_namespace);
  }
  if (*completion) {
    std::fputs(cusnap::cli::BashCompletion(app).c_str(), stdout);
    return cusnap::cli::kExitOk;
  }
  if (*checkpoint) {
    if (int rc = CheckTargetArgs("checkpoint", ck_target, checkpoint, ck_state_dir); rc != 0) {
      return rc;
    }
    // A job in a PID namespace of its own (restore --images-dir) is worked on in there.
    return InNamespace("checkpoint", ck_target, [&](const Target& target) {
      return cusnap::cli::CheckpointCommand(target, cusnap::cli::StateDir(ck_state_dir),
                                            lock_timeout_ms, ck_json);
    });
  }
  if (*dump) {
    if (int rc = CheckTargetArgs("dump", Target{dump_args.pid, false}, restore, ""); rc != 0) return rc;
    return InNamespace("dump", Target{dump_args.pid, false}, [&](const Target& target) {
      cusnap::cli::DumpArgs args = dump_args;
      args.pid = target.pid;
      args.in_job_namespace = target.in_job_namespace;
      return cusnap::cli::DumpCommand(args);
    });
  }
  if (*restore && !rs_images_dir.empty()) {
    if (rs_target.pid != 0 || rs_target.all || restore->count("--state-dir") > 0) {
      std::fprintf(stderr, "cusnap restore: --images-dir brings the job back in new processes: "
                   "give it without --pid, --all or --state-dir\n");
      return cusnap::cli::kExitUsage;
    }
    return cusnap::cli::RestoreImagesCommand(rs_images_dir, device_map, rs_json, rs_pid_namespace);
  }
  if (*restore && rs_pid_namespace) {
    std::fprintf(stderr, "cusnap restore: --pid-namespace goes with --images-dir (a job restored "
                 "in place stays in the namespace it runs in)\n");
    return cusnap::cli::kExitUsage;
  }
  if (*restore && rs_target.pid == 0 && !rs_target.all) {
    std::fprintf(stderr, "cusnap restore: give --pid or --all (the job to resume in place), or "
                 "--images-dir (a dump to bring back)\n");
    return cusnap::cli::kExitUsage;
  }
  if (*restore) {
    if (int rc = CheckTargetArgs("restore", rs_target, restore, rs_state_dir); rc != 0) return rc;
    return InNamespace("restore", rs_target, [&](const Target& target) {
      return cusnap::cli::RestoreCommand(target, cusnap::cli::StateDir(rs_state_dir), device_map,
                                         rs_json);
    });
  }
  if (*recover) {
    if (int rc = CheckTargetArgs("recover", rc_target, recover, rc_state_dir); rc != 0) return rc;
    return InNamespace("recover", rc_target, [&](const Target& target) {
      return cusnap::cli::RecoverCommand(target, cusnap::cli::StateDir(rc_state_dir),
                                         rc_device_map, rc_json);
    });
  }
  if (*status) {
    return InNamespace("status", st_target, [&](const Target& target) {
      return cusnap::cli::StatusCommand(target, st_json, st_prune);
    });
  }
  if (*inspect && (cusnap::coord::HasManifest(cusnap::cli::StateDir(inspect_dir)) ||
                   cusnap::coord::HasPendingManifest(cusnap::cli::StateDir(inspect_dir)) ||
                   cusnap::coord::IsFailedDump(cusnap::cli::StateDir(inspect_dir)))) {
    return cusnap::cli::InspectImagesCommand(cusnap::cli::StateDir(inspect_dir), in_json);
  }
  if (*inspect) {
    return cusnap::cli::InspectCommand(cusnap::cli::StateDir(inspect_dir), in_json);
  }
  if (*demo) return cusnap::cli::DemoCommand(demo_options);
  return cusnap::cli::kExitUsage;
}
