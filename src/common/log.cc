#include "common/log.h"

#include <fcntl.h>
#include <sys/stat.h>
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

// The log file (LogToFileSetting): its descriptor (-1: stderr) and which file it is. A program
// may close descriptors it did not open and reuse the number for a file of its own: a line is
// written only while the number still names this file, else the file is opened again.
std::atomic<int> g_file{-1};
std::atomic<dev_t> g_file_dev{0};
std::atomic<ino_t> g_file_ino{0};

constexpr int kLogFileFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;

/// Opens `path` as the log file and records which file it is; the errno when it cannot.
int OpenLogFile(const char* path) {
  const int fd = ::open(path, kLogFileFlags, 0600);
  if (fd < 0) return errno;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return error;
  }
  g_file_dev.store(st.st_dev, std::memory_order_relaxed);
  g_file_ino.store(st.st_ino, std::memory_order_relaxed);
  g_file.store(fd, std::memory_order_release);
  return 0;
}

/// Where a line goes now: the log file while its descriptor still names it (opened again when
/// the program took the number), else stderr.
int LineDestination() {
  const int fd = g_file.load(std::memory_order_acquire);
  if (fd < 0) return STDERR_FILENO;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_dev == g_file_dev.load(std::memory_order_relaxed) &&
      st.st_ino == g_file_ino.load(std::memory_order_relaxed)) {
    return fd;
  }
  const char* path = settings::Value(settings::kLogFile);
  if (path == nullptr || OpenLogFile(path) != 0) {
    g_file.store(-1, std::memory_order_release);
    return STDERR_FILENO;
  }
  return g_file.load(std::memory_order_acquire);
}

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

int LogToFileSetting() {
  const char* path = settings::Value(settings::kLogFile);
  return path == nullptr ? 0 : OpenLogFile(path);
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
  const int fd = LineDestination();
  const char* p = line;
  while (len > 0) {
    const ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    len -= static_cast<size_t>(n);
  }
  errno = saved_errno;
}

}  // namespace cusnap
