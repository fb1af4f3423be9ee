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
#include "cli/man_page.h"
#include "cli/output.h"
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
/// images directory: a relative path given to it names another place, and `restore
/// --images-dir D` with a relative D would fail at criu_restore).
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

/// Refuses `--pid 1` (init: its process tree is every process of the machine) before
/// anything is done. kExitOk when the pid is fine.
int RefuseInitPid(const char* command, const Target& target) {
  if (target.pid != 1) return cusnap::cli::kExitOk;
  std::fprintf(stderr, "cusnap %s: --pid 1 is init: its process tree is every process of "
               "the machine; give the job's own pid%s\n", command,
               std::string_view(command) == "dump" ? "" : ", or --all for every endpoint in "
                                                       "the control directory");
  return cusnap::cli::kExitUsage;
}

/// Refuses `--pid 1` (RefuseInitPid) and an `--state-dir` of `cmd` given empty, before
/// anything is done. kExitOk when both are fine.
int CheckTargetArgs(const char* command, const Target& target, const CLI::App* cmd,
                    const std::string& state_dir) {
  if (const int rc = RefuseInitPid(command, target); rc != cusnap::cli::kExitOk) return rc;
  if (cmd->count("--state-dir") > 0 && state_dir.empty()) {
    std::fprintf(stderr, "cusnap %s: --state-dir is empty; give a directory (left out: "
                 "$CUSNAP_STATE_DIR, else ./cusnap-state)\n", command);
    return cusnap::cli::kExitUsage;
  }
  return cusnap::cli::kExitOk;
}

/// The index of the "--" in `cusnap run [--pid-namespace] -- COMMAND...`; 0 when argv is not
/// that. Everything after it is the command, untouched: CLI11 2.1 would try to parse it as
/// extra arguments of the parent.
int RunDashesIndex(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) != "run") return 0;
  const int dashes = std::string_view(argv[2]) == "--pid-namespace" ? 3 : 2;
  return argc > dashes && std::string_view(argv[dashes]) == "--" ? dashes : 0;
}

/// `cusnap run` with no command after it: a usage error.
int NoRunCommand() {
  std::fprintf(stderr, "cusnap run: no command given\nUsage: cusnap run [--pid-namespace] "
                       "[--] COMMAND [ARGS...]\n");
  return cusnap::cli::kExitUsage;
}

/// `cusnap run [--pid-namespace] -- COMMAND...`, run without CLI11 (RunDashesIndex).
int RunAfterDashes(int argc, char** argv, int dashes) {
  if (argc == dashes + 1) return NoRunCommand();
  return cusnap::cli::RunCommand(std::vector<std::string>(argv + dashes + 1, argv + argc),
                                 std::string_view(argv[2]) == "--pid-namespace");
}

/// One subcommand of `cusnap`: its options, bound to its members by Define, and what it does
/// once a command line naming it was parsed.
class Subcommand {
 public:
  virtual ~Subcommand() = default;
  /// Adds the subcommand, its options and its --help footer to `app`.
  virtual void Define(CLI::App& app) = 0;
  /// Runs the subcommand `app` parsed; returns the exit status (exit_codes.h).
  virtual int Run(CLI::App& app) = 0;
  /// True when the parsed command line names this subcommand.
  bool Parsed() const { return cmd_ != nullptr && static_cast<bool>(*cmd_); }

 protected:
  CLI::App* cmd_ = nullptr;
};

/// `cusnap run [--pid-namespace] [--] COMMAND [ARGS...]`.
class RunSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    cmd_ = app.add_subcommand("run", "start a command with the cusnap shim preloaded");
    cmd_->prefix_command();
    cmd_->add_flag("--pid-namespace", pid_namespace_,
                   "start the command in a PID namespace of its own, as a container would: its "
                   "root's pid there is this cusnap's pid here, and a `restore --images-dir` of "
                   "it never meets pids other processes hold (needs CAP_SYS_ADMIN)");
    cmd_->footer("Usage: cusnap run [--pid-namespace] [--] COMMAND [ARGS...]; LD_PRELOAD gets the "
                 "shim prepended.\n"
                 "Exit status: the command's own (it replaces cusnap: 127 when the program is "
                 "not found, 126 when it is found but cannot be executed, 128+N when signal N "
                 "ends it); 2 for a usage error or a control directory it must not use, before it "
                 "starts; 1 when the shim is missing or, "
                 "with --pid-namespace, no PID namespace can be made.");
  }
  int Run(CLI::App&) override {
    std::vector<std::string> args = cmd_->remaining();
    if (args.empty()) return NoRunCommand();
    if (args.front() == "--") args.erase(args.begin());
    return cusnap::cli::RunCommand(args, pid_namespace_);
  }

 private:
  bool pid_namespace_ = false;
};

/// `cusnap checkpoint (--pid P | --all)`.
class CheckpointSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("checkpoint", "suspend a job: GPU memory freed, job parked");
    AddTarget(cmd_, target_, true);
    cmd_->add_option("--state-dir", state_dir_,
                     "where the state file goes (default $CUSNAP_STATE_DIR, else ./cusnap-state)");
    cmd_->add_option("--lock-timeout-ms", lock_timeout_ms_,
                     "cuCheckpointProcessLock timeout in ms (0: none)");
    cmd_->add_flag("--json", json_, "print one JSON document instead of lines");
    cmd_->footer(ExitCodesHelp(
        {kExitOk, kExitError, kExitUsage, kExitRefused, kExitFailedAfterChange, 130}));
  }
  int Run(CLI::App&) override {
    if (int rc = CheckTargetArgs("checkpoint", target_, cmd_, state_dir_); rc != 0) return rc;
    // A job in a PID namespace of its own (restore --images-dir) is worked on in there.
    return InNamespace("checkpoint", target_, [&](const Target& target) {
      return cusnap::cli::CheckpointCommand(target, cusnap::cli::StateDir(state_dir_),
                                            lock_timeout_ms_, json_);
    });
  }

 private:
  Target target_;
  std::string state_dir_;
  unsigned lock_timeout_ms_ = 0;
  bool json_ = false;
};

/// `cusnap restore`: in place (--pid P | --all), or from a dump's images (--images-dir D).
class RestoreSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("restore", "resume a checkpointed job, or bring a dumped "
                                         "one back from its images (--images-dir)");
    AddTarget(cmd_, target_, false, "--images-dir, the job of a dump");
    cmd_->add_option("--images-dir", images_dir_,
                     "restore the job `cusnap dump` wrote there, in new processes (CRIU); "
                     "no --pid, --all or --state-dir then")
        ->transform(kAbsolutePath);
    cmd_->add_option("--state-dir", state_dir_,
                     "where the state file is (default $CUSNAP_STATE_DIR, else ./cusnap-state)");
    cmd_->add_option("--device-map", device_map_, kDeviceMapHelp)->check(kNonEmptyDeviceMap);
    cmd_->add_flag("--json", json_, "print one JSON document instead of lines");
    cmd_->add_flag("--pid-namespace", pid_namespace_,
                   "with --images-dir: restore the job in a PID namespace of its own, where "
                   "it keeps its pids whatever holds them here (done without asking when a "
                   "pid of the dump is taken); later commands name it by any of its pids as "
                   "this machine numbers them");
    cmd_->footer(ExitCodesHelp(
        {kExitOk, kExitError, kExitUsage, kExitFailedAfterChange, kExitRestoreRefused, 130}));
  }
  int Run(CLI::App&) override {
    if (!images_dir_.empty()) return RunFromImages();
    if (int rc = CheckInPlaceArgs(); rc != 0) return rc;
    return InNamespace("restore", target_, [&](const Target& target) {
      return cusnap::cli::RestoreCommand(target, cusnap::cli::StateDir(state_dir_), device_map_,
                                         json_);
    });
  }

 private:
  /// `restore --images-dir D`: the job comes back in new processes, so nothing names old ones.
  int RunFromImages() {
    if (target_.pid != 0 || target_.all || cmd_->count("--state-dir") > 0) {
      std::fprintf(stderr, "cusnap restore: --images-dir brings the job back in new processes: "
                   "give it without --pid, --all or --state-dir\n");
      return cusnap::cli::kExitUsage;
    }
    return cusnap::cli::RestoreImagesCommand(images_dir_, device_map_, json_, pid_namespace_);
  }

  /// Refuses what a restore in place cannot do; kExitOk when the arguments fit one.
  int CheckInPlaceArgs() const {
    if (pid_namespace_) {
      std::fprintf(stderr, "cusnap restore: --pid-namespace goes with --images-dir (a job "
                   "restored in place stays in the namespace it runs in)\n");
      return cusnap::cli::kExitUsage;
    }
    if (target_.pid == 0 && !target_.all) {
      std::fprintf(stderr, "cusnap restore: give --pid or --all (the job to resume in place), "
                   "or --images-dir (a dump to bring back)\n");
      return cusnap::cli::kExitUsage;
    }
    return CheckTargetArgs("restore", target_, cmd_, state_dir_);
  }

  Target target_;
  std::string state_dir_, device_map_, images_dir_;
  bool json_ = false;
  bool pid_namespace_ = false;
};

/// `cusnap dump --pid P --images-dir D [--leave-running]`.
class DumpSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand(
        "dump", "checkpoint a job to disk: checkpoint, then CRIU writes its process tree and a "
                "manifest into --images-dir; the processes are gone (or run on with "
                "--leave-running); 'restore --images-dir' brings it back");
    cmd_->add_option("--pid", args_.pid, "the job's root process: its whole process tree")
        ->required()
        ->check(PidValidator());
    cmd_->add_option("--images-dir", args_.images_dir, "where the images go")
        ->required()
        ->transform(kAbsolutePath);
    cmd_->add_flag("--leave-running", args_.leave_running,
                   "resume the job in place after the dump");
    cmd_->add_flag("--json", args_.json, "print one JSON document instead of lines");
    cmd_->footer(ExitCodesHelp(
        {kExitOk, kExitError, kExitUsage, kExitRefused, kExitFailedAfterChange, 130}));
  }
  int Run(CLI::App&) override {
    if (int rc = RefuseInitPid("dump", Target{args_.pid, false}); rc != 0) return rc;
    return InNamespace("dump", Target{args_.pid, false}, [&](const Target& target) {
      cusnap::cli::DumpArgs args = args_;
      args.pid = target.pid;
      args.in_job_namespace = target.in_job_namespace;
      return cusnap::cli::DumpCommand(args);
    });
  }

 private:
  cusnap::cli::DumpArgs args_;
};

/// `cusnap criu-plugin <action> ...`: run by libcusnap_criu.so, not by people (not in --help).
class CriuPluginSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    cmd_ = app.add_subcommand("criu-plugin", "what the CRIU plugin runs from CRIU's hooks");
    cmd_->group("");
    cmd_->add_option("action", args_.action, "dump, dump-end, check or restore")->required();
    cmd_->add_option("--pid", args_.pid, "the tree's root");
    cmd_->add_option("--images-dir", args_.images_dir, "CRIU's images directory")->required();
    cmd_->add_option("--criu-version", args_.criu_version, "CRIU's version line");
    cmd_->add_option("--criu-mode", args_.criu_mode, "a CRIU mode the plugin cannot serve");
    cmd_->add_option("--criu-ret", args_.criu_ret, "the dump's result");
    cmd_->add_option("--device-map", args_.device_map, kDeviceMapHelp);
  }
  int Run(CLI::App&) override { return cusnap::cli::CriuPluginCommand(args_); }

 private:
  cusnap::cli::CriuPluginArgs args_;
};

/// `cusnap recover (--pid P | --all)`.
class RecoverSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand(
        "recover", "finish what an interrupted or failed checkpoint or restore left: roll every "
                   "participant back to active before the point of no return, forward after it");
    AddTarget(cmd_, target_, true);
    cmd_->add_option("--state-dir", state_dir_,
                     "the checkpoint's state directory, to verify a roll forward against "
                     "(default $CUSNAP_STATE_DIR, else ./cusnap-state; missing: not verified)");
    cmd_->add_option("--device-map", device_map_,
                     std::string(kDeviceMapHelp) + "; used when the roll forward still has "
                     "to restore natively (give the interrupted restore's map)")
        ->check(kNonEmptyDeviceMap);
    cmd_->add_flag("--json", json_, "print one JSON document instead of lines");
    cmd_->footer(ExitCodesHelp(
        {kExitOk, kExitError, kExitUsage, kExitFailedAfterChange, kExitRestoreRefused, 130}));
  }
  int Run(CLI::App&) override {
    if (int rc = CheckTargetArgs("recover", target_, cmd_, state_dir_); rc != 0) return rc;
    return InNamespace("recover", target_, [&](const Target& target) {
      return cusnap::cli::RecoverCommand(target, cusnap::cli::StateDir(state_dir_),
                                         device_map_, json_);
    });
  }

 private:
  Target target_;
  std::string state_dir_, device_map_;
  bool json_ = false;
};

/// `cusnap status [--pid P | --all] [--json] [--prune]`.
class StatusSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("status", "participants, phase, allocations, bytes");
    AddTarget(cmd_, target_, false, "every endpoint in the control directory");
    cmd_->add_flag("--json", json_, "print one JSON document");
    cmd_->add_flag("--prune", prune_,
                   "remove stale endpoint sockets (their process is gone, or its pid was "
                   "reused), the hold markers of processes that ended while held and the "
                   "start-time aliases of restored processes that ended; never a live one");
    cmd_->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
  }
  int Run(CLI::App&) override {
    return InNamespace("status", target_, [&](const Target& target) {
      return cusnap::cli::StatusCommand(target, json_, prune_);
    });
  }

 private:
  Target target_;
  bool json_ = false, prune_ = false;
};

/// `cusnap inspect [DIR]`: a checkpoint's state directory, or a dump's images directory.
class InspectSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("inspect", "show what a checkpoint recorded");
    cmd_->add_option("state_dir", dir_,
                     "the checkpoint's state directory, or its cusnap-state.json (default "
                     "$CUSNAP_STATE_DIR, else ./cusnap-state)");
    cmd_->add_flag("--json", json_, "print the state file as one JSON document");
    cmd_->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
  }
  int Run(CLI::App&) override {
    const std::string dir = cusnap::cli::StateDir(dir_);
    if (cusnap::coord::HasManifest(dir) || cusnap::coord::HasPendingManifest(dir) ||
        cusnap::coord::IsFailedDump(dir)) {
      return cusnap::cli::InspectImagesCommand(dir, json_);
    }
    return cusnap::cli::InspectCommand(dir, json_);
  }

 private:
  std::string dir_;
  bool json_ = false;
};

/// `cusnap demo [--sizes A,B,C] [--json]`.
class DemoSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("demo", "two-process sharing demo: checkpoint + restore + verify");
    cmd_->add_option("--sizes", options_.sizes,
                     "the three allocation sizes, multiples of 2M (default 2M,64M,256M on the "
                     "simulated driver, 64M,1G,2G on GPUs)");
    cmd_->add_flag("--json", options_.json, "print the summary as one JSON document");
    cmd_->footer(ExitCodesHelp({kExitOk, kExitError, kExitUsage}));
  }
  int Run(CLI::App&) override { return cusnap::cli::DemoCommand(options_); }

 private:
  cusnap::cli::DemoOptions options_;
};

/// `cusnap completion bash|zsh|fish`.
class CompletionSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    using namespace cusnap::cli;
    cmd_ = app.add_subcommand("completion", "print a shell completion script");
    cmd_->footer(ExitCodesHelp({kExitOk, kExitUsage}));
    cmd_->add_option("shell", shell_, "the shell (bash, zsh or fish)")
        ->required()
        ->check(CLI::IsMember(kCompletionShells));
  }
  int Run(CLI::App& app) override {
    std::fputs(cusnap::cli::CompletionScript(app, shell_).c_str(), stdout);
    return cusnap::cli::kExitOk;
  }

 private:
  std::string shell_;
};

/// `cusnap man-page`: the manual page in roff, which the build installs (not in --help).
class ManPageSubcommand final : public Subcommand {
 public:
  void Define(CLI::App& app) override {
    cmd_ = app.add_subcommand("man-page", "print the manual page (roff)");
    cmd_->group("");
  }
  int Run(CLI::App& app) override {
    std::fputs(cusnap::cli::ManPage(app).c_str(), stdout);
    return cusnap::cli::kExitOk;
  }
};

/// The top-level options of `cusnap`: one subcommand, the exit codes, --version.
void DefineApp(CLI::App& app) {
  app.footer(cusnap::cli::AllExitCodesHelp());
  app.require_subcommand(1);
  // A callback: the shim file is read only when --version is asked (reading it at every start
  // costs each command 3 s under AddressSanitizer).
  app.set_version_flag("--version", std::function<std::string()>(VersionText),
                       "print the versions of cusnap and its shim");
}

/// The subcommands of `app` offered to people (not the hidden criu-plugin, run by the CRIU
/// plugin), in their order.
std::vector<std::string> OfferedCommands(const CLI::App& app) {
  std::vector<std::string> commands;
  const auto named = [](const CLI::App* sub) { return !sub->get_name().empty(); };
  for (const CLI::App* sub : app.get_subcommands(named)) {
    if (!sub->get_group().empty()) commands.push_back(sub->get_name());
  }
  return commands;
}

/// Refuses a command word that names no subcommand of `app`, with the ones there are, and a
/// command line with no word at all (`cusnap` alone); kExitOk otherwise.
int RefuseUnknownCommand(const CLI::App& app, const std::string& word, int argc) {
  const std::vector<std::string> commands = OfferedCommands(app);
  if (argc == 1) {
    std::fprintf(stderr, "cusnap: %s\n", cusnap::cli::NoCommand(commands).c_str());
    return cusnap::cli::kExitUsage;
  }
  const auto named = [](const CLI::App* sub) { return !sub->get_name().empty(); };
  for (const CLI::App* sub : app.get_subcommands(named)) {
    if (sub->get_name() == word) return cusnap::cli::kExitOk;
  }
  if (const std::string unknown = cusnap::cli::UnknownCommand(word, commands); !unknown.empty()) {
    std::fprintf(stderr, "cusnap: %s\n", unknown.c_str());
    return cusnap::cli::kExitUsage;
  }
  return cusnap::cli::kExitOk;
}

/// True when --json stands anywhere before the job's own arguments: a usage error is then
/// answered as JSON too.
bool AsksForJson(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    json |= std::string_view(argv[i]) == "--json";
  }
  return json;
}

/// Refuses a bad value of a setting `command` reads (SettingsProblemsOf), each named on
/// stderr with what it takes (and in one JSON document on stdout when `json`), before
/// anything starts: kExitUsage, else kExitOk.
int RefuseBadSettings(const std::string& command, bool json) {
  std::vector<std::string> problems = cusnap::cli::SettingsProblemsOf(command);
  if (problems.empty()) return cusnap::cli::kExitOk;
  for (std::string& problem : problems) {
    problem += command == "run" ? "; the job was not started" : "; nothing was changed";
    std::fprintf(stderr, "cusnap %s: %s\n", command.c_str(), problem.c_str());
  }
  if (json) {
    std::printf("%s\n", cusnap::cli::UntouchedToJson(command, cusnap::cli::kExitUsage, problems)
                            .dump(2).c_str());
  }
  return cusnap::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // The init of a job's PID namespace, run again once inside it (pid_namespace.h).
  if (argc == 4 && std::string_view(argv[1]) == cusnap::cli::kNamespaceInitCommand) {
    cusnap::cli::ServeAsNamespaceInit(argv[2], argv[3]);
  }
  if (const int dashes = RunDashesIndex(argc, argv); dashes > 0) {
    if (const int rc = RefuseBadSettings("run", false); rc != cusnap::cli::kExitOk) return rc;
    return RunAfterDashes(argc, argv, dashes);
  }

  CLI::App app{"cusnap: checkpoint and restore of multi-process CUDA jobs that share GPU memory"};
  DefineApp(app);
  RunSubcommand run;
  CheckpointSubcommand checkpoint;
  RestoreSubcommand restore;
  DumpSubcommand dump;
  RecoverSubcommand recover;
  StatusSubcommand status;
  InspectSubcommand inspect;
  DemoSubcommand demo;
  CompletionSubcommand completion;
  CriuPluginSubcommand criu_plugin;
  ManPageSubcommand man_page;
  // In the order --help, the completion scripts and the man page list them (criu-plugin and
  // man-page are in none).
  Subcommand* const subcommands[] = {&run,    &checkpoint, &restore,    &dump,
                                     &recover, &status,    &inspect,    &demo,
                                     &completion, &criu_plugin, &man_page};
  for (Subcommand* subcommand : subcommands) subcommand->Define(app);

  const std::string word = cusnap::cli::CommandWord(argc, argv);
  if (const int rc = RefuseUnknownCommand(app, word, argc); rc != cusnap::cli::kExitOk) return rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cusnap::cli::ReportParseError(app, word, e, AsksForJson(argc, argv));
  }
  for (Subcommand* subcommand : subcommands) {
    if (!subcommand->Parsed()) continue;
    if (const int rc = RefuseBadSettings(word, AsksForJson(argc, argv)); rc != cusnap::cli::kExitOk) return rc;
    return subcommand->Run(app);
  }
  return cusnap::cli::kExitUsage;
}
