// `cusnap completion bash|zsh|fish`: shell completion scripts made from the CLI's own
// definition (outline.h; CLI11 2.1, the version Debian 12 ships, cannot print one). The build
// writes each one beside the man page (cmake/cli_docs.cmake) and installs them where each
// shell looks.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace cusnap::cli {

/// The shells `cusnap completion` prints a script for (its argument's values).
inline const std::vector<std::string> kCompletionShells = {"bash", "zsh", "fish"};

/// A bash script that completes `cusnap`'s commands and each one's long options; the shells
/// after `completion`, directories after --state-dir and --images-dir, directories and state
/// files after `inspect`, files after `run`. Source it, or install it as
/// share/bash-completion/completions/cusnap.
std::string BashCompletion(const CLI::App& app);

/// A zsh script (`#compdef cusnap`) completing the same, with each option's help: install it
/// as `_cusnap` in a folder of `$fpath` (share/zsh/site-functions).
std::string ZshCompletion(const CLI::App& app);

/// A fish script completing the same, with each option's help: install it as
/// share/fish/vendor_completions.d/cusnap.fish.
std::string FishCompletion(const CLI::App& app);

/// The script of `shell` (one of kCompletionShells).
std::string CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace cusnap::cli
