// `cusnap completion bash`: a bash completion script made from the CLI's own option tables
// (CLI11 2.1, the version Debian 12 ships, cannot print one).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace cusnap::cli {

/// The shells `cusnap completion` prints a script for (its argument's values).
inline const std::vector<std::string> kCompletionShells = {"bash"};

/// A bash script that completes `cusnap`'s subcommands and each one's options, listed from
/// `app` (options of option groups included); the shells after `completion`, directories
/// after --state-dir, directories and state files after `inspect`, files after `run`. Source it, or install it as
/// share/bash-completion/completions/cusnap.
std::string BashCompletion(CLI::App& app);

}  // namespace cusnap::cli
