#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/settings.h"

namespace cusnap {
namespace {

std::atomic<int> g_level{-1};  // -1: CUSNAP_LOG not read yet

// The table's values are in LogLevel's order: error, warn, info, debug.
int ParseLevel(const char* text) {
  if (text == nullptr) return static_cast<int>(LogLevel::kError);
  return static_cast<int>(settings::WordIndex(settings::kLog, text).value_or(0));
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

}  // namespace

LogLevel CurrentLogLevel() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level < 0) {
    level = ParseLevel(settings::Value(settings::kLog));
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void Log(LogLevel level, const char* format, ...) {
  if (!LogEnabled(level)) return;
  const int saved_errno = errno;
  char line[1024];
  int used = std::snprintf(line, sizeof line, "cusnap[%d] %s: ", static_cast<int>(getpid()),
                           LevelName(level));
  if (used < 0) used = 0;
  size_t len = static_cast<size_t>(used);
  va_list args;
  va_start(args, format);
  const int body = std::vsnprintf(line + len, sizeof line - len, format, args);
  va_end(args);
  if (body > 0) len += static_cast<size_t>(body);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  const char* p = line;
  while (len > 0) {
    const ssize_t n = write(STDERR_FILENO, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    len -= static_cast<size_t>(n);
  }
  errno = saved_errno;
}

}  // namespace cusnap
