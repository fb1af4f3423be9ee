// `cusnap completion bash`: a bash completion script made from the CLI's own option tables
// (CLI11 2.1, the version Debian 12 ships, cannot print one).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace cusnap::cli {

/// A bash script that completes `cusnap`'s subcommands and each one's options, listed from
/// `app` (options of option groups included). Source it, or install it as
/// share/bash-completion/completions/cusnap.
std::string BashCompletion(CLI::App& app);

}  // namespace cusnap::cli
