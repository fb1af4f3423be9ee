// `man cusnap`: the manual page, made from the CLI's own definition (outline.h) and the
// settings table (common/settings.h), so that it names every command, option and setting the
// program has and no other. The build writes it with the hidden `cusnap man-page`
// (cmake/cli_docs.cmake) and installs it as share/man/man1/cusnap.1.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace cusnap::cli {

/// The manual page of `app` in roff (man(7) macros): NAME, SYNOPSIS, DESCRIPTION, one
/// subsection per command with its options and exit statuses, ENVIRONMENT (every setting:
/// what it takes, its default, who reads it), EXIT STATUS, FILES and SEE ALSO.
std::string ManPage(const CLI::App& app);

}  // namespace cusnap::cli
