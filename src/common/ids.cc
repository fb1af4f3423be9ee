#include "common/ids.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/endpoint_client.h"
#include "common/text.h"

namespace cusnap {

// Hand-written: glibc 2.38 headers bind strtoull to a symbol newer than the shim's 2.34
// ceiling, SPEC-REFERENCE I.4.
bool ParseDecimal(const char*& p, const char* end, uint64_t* out) {
  uint64_t value = 0;
  const char* start = p;
  while (p < end && *p >= '0' && *p <= '9') {
    value = value * 10 + static_cast<uint64_t>(*p - '0');
    ++p;
  }
  *out = value;
  return p != start;
}

ssize_t ReadSmallFile(const char* path, char* buf, size_t capacity) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  while (len < capacity) {
    const ssize_t n = read(fd, buf + len, capacity - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<size_t>(n);
  }
  close(fd);
  return static_cast<ssize_t>(len);
}

uint64_t RestoredStartTime(int pid, uint64_t now) {
  const std::string path = RestoredAliasPath(ControlDir(), pid);
  char buf[96];
  const ssize_t n = ReadSmallFile(path.c_str(), buf, sizeof buf);
  if (n <= 0) return now;
  const char* p = buf;
  const char* end = buf + n;
  uint64_t seen[2] = {0, 0}, original = 0;
  for (uint64_t& v : seen) {
    if (!ParseDecimal(p, end, &v) || p == end || *p++ != ' ') return now;
  }
  if (!ParseDecimal(p, end, &original)) return now;
  return now == seen[0] || now == seen[1] ? original : now;
}

std::string RestoredAliasPath(const std::string& control_dir, int pid) {
  return control_dir + "/restored/" + std::to_string(pid);
}

uint64_t ProcessStartTime(int pid) {
  const uint64_t now = KernelStartTime(pid);
  return now == 0 ? 0 : RestoredStartTime(pid, now);
}

Result<uint64_t> ProcessStartTimeOrShortage(int pid) {
  // Every read ProcessStartTime makes leaves errno as open(2) set it when it failed; a
  // success sets nothing, and an absent process or alias file is ENOENT or ESRCH.
  errno = 0;
  const uint64_t start = ProcessStartTime(pid);
  const int error = errno;
  if (error == EMFILE || error == ENFILE || error == ENOMEM) {
    return Error{error, "cannot read /proc/" + std::to_string(pid) + "/stat: " +
                            std::strerror(error) + " (no verdict on that process)"};
  }
  return start;
}

uint64_t KernelStartTime(int pid) {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  char buf[1024];
  const ssize_t read_bytes = ReadSmallFile(path, buf, sizeof buf);
  if (read_bytes < 0) return 0;
  const size_t len = static_cast<size_t>(read_bytes);
  // The command name (field 2) may hold spaces and parentheses: fields restart after the
  // last ')'. Field 3 (state) is the first token after it, so field 22 is the 20th.
  const char* end = buf + len;
  const char* p = end;
  while (p > buf && p[-1] != ')') --p;
  if (p == buf) return 0;
  for (int field = 3; field < 22; ++field) {
    while (p < end && *p == ' ') ++p;
    while (p < end && *p != ' ') ++p;
  }
  while (p < end && *p == ' ') ++p;
  uint64_t start = 0;
  return ParseDecimal(p, end, &start) ? start : 0;
}

ProcessIdentity SelfIdentity() {
  // Cached per pid so a forked child re-reads its own start time on first use.
  static std::atomic<int> cached_pid{0};
  static std::atomic<uint64_t> cached_start{0};
  const int pid = static_cast<int>(getpid());
  if (cached_pid.load(std::memory_order_acquire) == pid) {
    return {pid, cached_start.load(std::memory_order_relaxed)};
  }
  const uint64_t start = ProcessStartTime(pid);
  cached_start.store(start, std::memory_order_relaxed);
  cached_pid.store(pid, std::memory_order_release);
  return {pid, start};
}

std::string DescribeObject(const proto::ObjectId& id, const char* what) {
  return std::string(what) + " " + std::to_string(id.local_id) + " of " +
         ProcessText(id.creator_pid, "start " + std::to_string(id.creator_start));
}

}  // namespace cusnap
