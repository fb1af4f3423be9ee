// Diagnostics for the shim and the coordinator: one line per message on stderr, prefixed
// `cusnap[<pid>]`, filtered by CUSNAP_LOG (error (default), warn, info, debug; DESIGN.md,
// "Environment"). Async-signal-unsafe but allocation-free: safe inside other people's
// processes and after fork.
#pragma once

namespace cusnap {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// The level CUSNAP_LOG asks for, read once per process (unknown values mean error).
LogLevel CurrentLogLevel();

/// True when a message at `level` would be printed.
inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(CurrentLogLevel());
}

/// Formats (printf-style, truncated at 1 KiB) and writes one line to stderr when `level`
/// is enabled. Never allocates; errno is preserved.
void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace cusnap

#define CUSNAP_LOG_ERROR(...) ::cusnap::Log(::cusnap::LogLevel::kError, __VA_ARGS__)
#define CUSNAP_LOG_WARN(...) ::cusnap::Log(::cusnap::LogLevel::kWarn, __VA_ARGS__)
#define CUSNAP_LOG_INFO(...) ::cusnap::Log(::cusnap::LogLevel::kInfo, __VA_ARGS__)
#define CUSNAP_LOG_DEBUG(...) ::cusnap::Log(::cusnap::LogLevel::kDebug, __VA_ARGS__)
