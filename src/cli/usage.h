// How `cusnap` words its own usage errors: every one starts "cusnap <command>:",
// an unknown command is named with the commands there are, and a --pid that is not a pid
// says what a pid is.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace cusnap::cli {

/// The command word of argv (the first argument not starting with '-'), "" when none.
std::string CommandWord(int argc, char** argv);

/// "" when `word` is one of `commands` (or empty); else "unknown command 'W'; the commands
/// are: ..." and, when one is within two edits of it, "; did you mean 'C'?".
std::string UnknownCommand(const std::string& word, const std::vector<std::string>& commands);

/// "a command is required; the commands are: ... (cusnap --help says what each does)": the
/// answer to `cusnap` alone.
std::string NoCommand(const std::vector<std::string>& commands);

/// The validator of --pid: a positive integer up to 2^30; otherwise "'abc' is not a number
/// (a pid is a positive integer)" or "'0' is not a pid (a pid is a positive integer, at
/// most 1073741824)".
CLI::Validator PidValidator();

/// Prints CLI11's parse error `e` for `command` ("" before a command was named) as
/// "cusnap <command>: <what>" (for an unexpected option within two edits of one the command
/// has, "; did you mean '--x' for '--y'?" after it) plus where to find help, or help/version
/// text when `e` asks
/// for it. Returns the exit status (0 for help and version, else 2). With `json` (the
/// command line asked for --json), the error is also one JSON document on stdout
/// (UntouchedToJson).
int ReportParseError(CLI::App& app, const std::string& command, const CLI::ParseError& e,
                     bool json = false);

}  // namespace cusnap::cli
