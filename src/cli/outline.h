// The CLI's own definition (its CLI11 App) read back as plain data: each command people are
// offered with its options, what their values are, and its help. The completion scripts, the
// man page and the "did you mean" of a mistyped option are all made from it, so none of them
// can name an option the program does not have or miss one it has.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace cusnap::cli {

/// What a shell offers for an option's value or a positional argument.
enum class ValueKind {
  kNone,       ///< a flag: no value
  kText,       ///< any word
  kPid,        ///< a process id
  kDirectory,  ///< a directory
  kFile,       ///< a file or a directory
  kShell,      ///< one of kCompletionShells (completion.h)
  kCommand,    ///< a program and its arguments (`run`)
};

/// One option or positional argument of a command.
struct OptionOutline {
  std::string name;  ///< "--pid"; a positional's own name ("state_dir")
  bool positional = false;
  bool required = false;
  ValueKind value = ValueKind::kNone;
  std::string help;
  std::string group;  ///< the option group's description ("which processes (exactly one of)")
};

/// One command as --help shows it: "" is `cusnap` itself.
struct CommandOutline {
  std::string name;
  std::string description;
  std::vector<OptionOutline> options;  ///< option groups' included, each once, --help too
  std::string footer;
};

/// `cusnap` itself, then every command people are offered, in --help's order (a command of
/// no group, like criu-plugin, which the CRIU plugin runs, is left out).
std::vector<CommandOutline> Outline(const CLI::App& app);

/// The long option names ("--pid") of `app` and of its option groups, each once.
std::vector<std::string> LongOptionNames(const CLI::App& app);

/// `help` up to its first ';', ':' or '(' (at most 72 characters), for one line of a
/// completion menu.
std::string ShortHelp(const std::string& help);

}  // namespace cusnap::cli
