// Exit statuses of `cusnap` (documented in `cusnap --help` and the README).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

namespace cusnap::cli {

inline constexpr int kExitOk = 0;              ///< full success
inline constexpr int kExitError = 1;           ///< other error (driver not loadable: job not changed, ...)
inline constexpr int kExitUsage = 2;           ///< bad arguments
inline constexpr int kExitRefused = 3;         ///< checkpoint refused before any change: job untouched
inline constexpr int kExitFailedAfterChange = 4;  ///< a destructive step failed: job not running normally
inline constexpr int kExitRestoreRefused = 5;  ///< restore refused before any change

/// What each status means, for --help; 130 stands for the pair 130/143.
inline constexpr std::pair<int, const char*> kExitMeanings[] = {
    {kExitOk, "0 success"},
    {kExitError, "1 other error (e.g. the CUDA driver cannot be loaded: the job is not changed)"},
    {kExitUsage, "2 usage"},
    {kExitRefused, "3 checkpoint refused before any change (job untouched)"},
    {kExitFailedAfterChange, "4 failed after a destructive step"},
    {kExitRestoreRefused, "5 restore refused before any change"},
    {130, "130 (SIGINT) or 143 (SIGTERM): interrupted and stopped before any change"},
};

/// The "Exit status: ..." line of a command's --help, naming only `codes` (each a kExit*
/// value or 130) in kExitMeanings' order.
inline std::string ExitCodesHelp(std::initializer_list<int> codes) {
  std::string text;
  for (const auto& [code, meaning] : kExitMeanings) {
    if (std::find(codes.begin(), codes.end(), code) == codes.end()) continue;
    text += (text.empty() ? "Exit status: " : "; ") + std::string(meaning);
  }
  return text + ".";
}

/// Every status any command gives, for `cusnap --help`.
inline std::string AllExitCodesHelp() {
  return ExitCodesHelp({kExitOk, kExitError, kExitUsage, kExitRefused, kExitFailedAfterChange,
                        kExitRestoreRefused, 130});
}

}  // namespace cusnap::cli
