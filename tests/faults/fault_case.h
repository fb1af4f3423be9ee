// The fault matrix's cases (tests/faults/): what one case does to a job, written as one line
// so that the matrix's driver can hand it to a child test process and name it in the summary,
// and how the cases are enumerated from a clean run of the job (the phases the CLI paused at,
// the driver entry points each process called in each phase).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace faults {

/// What is done to the job at a phase boundary of the command.
enum class Kind {
  kCliSigint,        ///< SIGINT to the CLI, then SIGCONT
  kCliSigkill,       ///< SIGKILL to the CLI
  kKillParticipant,  ///< SIGKILL to participant `process`, then SIGCONT to the CLI
  kDriverError,      ///< the phase's first call of `entry` in `process` fails
};

/// One case of the matrix.
struct Case {
  Kind kind = Kind::kCliSigint;
  /// "checkpoint", "restore" (restore cases checkpoint first), "dump" or "restore-images"
  /// (`restore --images-dir`; its cases dump first)
  std::string command;
  std::string phase;    ///< a phase name as the CLI prints it
  std::string when;     ///< "before" or "after" the phase (test_pause.h)
  std::string process;  ///< a job process's name ("A", "root", ...), or "cli"; "" for CLI signals
  std::string entry;    ///< kDriverError: the driver entry point
  /// kDriverError in a process whose faults are armed by number (CommandPlan::counted): which
  /// call of `entry`, counted from its start
  unsigned nth = 0;

  /// One line, e.g. "driver-error restore reallocate before A cuMemCreate 0".
  std::string Text() const;
  /// Case::Text's inverse; nullopt for a malformed line.
  static std::optional<Case> Parse(const std::string& text);
};

/// What the clean enumeration run saw of one command.
struct CommandPlan {
  std::vector<std::string> phases;  ///< in the order they ran
  /// (phase, process) -> the distinct entry points it called during the phase, each with the
  /// number of calls of it the process had made before the phase (for a counted one's nth).
  std::map<std::pair<std::string, std::string>, std::map<std::string, unsigned>> calls;
  /// The job's processes: each is killed at every boundary where it exists.
  std::vector<std::string> workers;
  /// Boundaries ("<phase>:<when>") at which the job's processes did not exist (CRIU had taken
  /// them to disk, or not brought them back yet): nobody to kill there.
  std::set<std::string> without_job;
  /// Processes whose faults are armed by call number from their start (SIMCUDA_FAULTS)
  /// rather than asked for at the pause: the CLI (it is stopped there), and the processes of
  /// a job CRIU dumps (they have no command channel: it would have to go to disk too).
  std::set<std::string> counted = {"cli"};
};

/// Every case for `plans` (command -> what its clean run saw): before and after each phase,
/// SIGINT and SIGKILL of the CLI; before the first phase and after each phase, SIGKILL of each
/// worker, where the job exists; before each phase, an error in each entry point it calls, in
/// each process that calls it.
std::vector<Case> Enumerate(const std::map<std::string, CommandPlan>& plans);

}  // namespace faults
