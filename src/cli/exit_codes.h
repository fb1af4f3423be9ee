// Exit statuses of `cusnap` (documented in `cusnap --help` and the README).
#pragma once

namespace cusnap::cli {

inline constexpr int kExitOk = 0;              ///< full success
inline constexpr int kExitError = 1;           ///< other error (driver not loadable: job not changed, ...)
inline constexpr int kExitUsage = 2;           ///< bad arguments
inline constexpr int kExitRefused = 3;         ///< checkpoint refused before any change: job untouched
inline constexpr int kExitFailedAfterChange = 4;  ///< a destructive step failed: job not running normally
inline constexpr int kExitRestoreRefused = 5;  ///< restore refused before any change

/// One line per status, for --help.
inline constexpr const char* kExitCodesHelp =
    "Exit status: 0 success; 1 other error (e.g. the CUDA driver cannot be loaded: the job is "
    "not changed); 2 usage; 3 checkpoint refused before any change "
    "(job untouched); 4 failed after a destructive step; 5 restore refused before any change; "
    "130 (SIGINT) or 143 (SIGTERM): interrupted and stopped before any change.";

}  // namespace cusnap::cli
