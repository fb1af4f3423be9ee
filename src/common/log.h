// Diagnostics for the shim and the coordinator: one line per message on stderr (or, in a
// shim, the file CUSNAP_LOG_FILE names), prefixed `cusnap[<pid>]`, filtered by CUSNAP_LOG
// (error (default), warn, info, debug; common/settings.h). Async-signal-unsafe but
// allocation-free: safe inside other people's processes and after fork.
#pragma once

namespace cusnap {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// The level CUSNAP_LOG asks for, read once per process (unknown values mean error).
LogLevel CurrentLogLevel();

/// True when a message at `level` would be printed.
inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= static_cast<int>(CurrentLogLevel());
}

/// Sends this process's log lines from now on to the file CUSNAP_LOG_FILE names, opened
/// O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC (mode 0600), so that the lines of every process of
/// a job land whole and in order. Returns 0 when the lines go there, or when the setting is
/// unset; the errno of the open when it fails, and the lines stay on stderr. Called by the
/// shim's constructor (the commands log to their own stderr).
int LogToFileSetting();

/// Formats (printf-style, truncated at 1 KiB) and writes one line to stderr when `level`
/// is enabled, to stderr or the log file (LogToFileSetting). Never allocates; errno is
/// preserved.
void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace cusnap

#define CUSNAP_LOG_ERROR(...) ::cusnap::Log(::cusnap::LogLevel::kError, __VA_ARGS__)
#define CUSNAP_LOG_WARN(...) ::cusnap::Log(::cusnap::LogLevel::kWarn, __VA_ARGS__)
#define CUSNAP_LOG_INFO(...) ::cusnap::Log(::cusnap::LogLevel::kInfo, __VA_ARGS__)
#define CUSNAP_LOG_DEBUG(...) ::cusnap::Log(::cusnap::LogLevel::kDebug, __VA_ARGS__)
