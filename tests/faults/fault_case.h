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
  std::string command;  ///< "checkpoint" or "restore" (restore cases checkpoint first)
  std::string phase;    ///< a phase name as the CLI prints it
  std::string when;     ///< "before" or "after" the phase (test_pause.h)
  std::string process;  ///< a worker's name ("A", "B", "C"), or "cli"; "" for CLI signals
  std::string entry;    ///< kDriverError: the driver entry point
  unsigned nth = 0;     ///< kDriverError in the CLI: which call of `entry` (counted from start)

  /// One line, e.g. "driver-error restore reallocate before A cuMemCreate 0".
  std::string Text() const;
  /// Case::Text's inverse; nullopt for a malformed line.
  static std::optional<Case> Parse(const std::string& text);
};

/// What the clean enumeration run saw of one command.
struct CommandPlan {
  std::vector<std::string> phases;  ///< in the order they ran
  /// (phase, process) -> the distinct entry points it called during the phase, each with the
  /// number of calls of it the process had made before the phase (for the CLI's nth).
  std::map<std::pair<std::string, std::string>, std::map<std::string, unsigned>> calls;
};

/// Every case for `plans` ("checkpoint", "restore" -> what their clean run saw), over the
/// job's `workers`: before and after each phase, SIGINT and SIGKILL of the CLI; before the
/// first phase and after each phase, SIGKILL of each worker; before each phase, an error in
/// each entry point it calls, in each process that calls it.
std::vector<Case> Enumerate(const std::map<std::string, CommandPlan>& plans,
                            const std::vector<std::string>& workers);

}  // namespace faults
