// The hold marker's one format (hold_marker.h), shared by the coordinator and the shim: no
// stdio, no iostreams (the shim lives in other people's processes).
#include "common/hold_marker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/ids.h"

namespace cusnap {

std::string HeldMarkerPath(const std::string& dir, int pid) {
  return dir + "/" + std::to_string(pid) + ".held";
}

uint64_t OwnPidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

Status WriteHoldMarker(const std::string& path, const HoldMarker& marker) {
  const std::string tmp = path + ".tmp";
  char text[96];
  const int len = std::snprintf(text, sizeof text, "%llu %llu%s%.32s\n",
                                static_cast<unsigned long long>(marker.start_time),
                                static_cast<unsigned long long>(marker.pid_namespace),
                                marker.phase.empty() ? "" : " ", marker.phase.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{errno, "cannot create " + tmp + ": " + std::strerror(errno)};
  const bool written = ::write(fd, text, static_cast<size_t>(len)) == len;
  const int saved = errno;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = written ? errno : saved;
    ::unlink(tmp.c_str());
    return Error{why, "cannot write " + path + ": " + std::strerror(why)};
  }
  return Ok{};
}

std::optional<HoldMarker> ReadHoldMarker(const std::string& path) {
  char buf[96];
  const ssize_t n = ReadSmallFile(path.c_str(), buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  const char* p = buf;
  const char* end = buf + n;
  HoldMarker marker;
  if (!ParseDecimal(p, end, &marker.start_time)) return std::nullopt;
  if (p != end && *p == ' ') {
    ++p;
    if (!ParseDecimal(p, end, &marker.pid_namespace)) marker.pid_namespace = 0;
  }
  if (p != end && *p == ' ') {
    const char* word = ++p;
    while (p != end && ((*p >= 'A' && *p <= 'Z') || *p == '_')) ++p;
    marker.phase.assign(word, static_cast<size_t>(p - word));
  }
  return marker;
}

}  // namespace cusnap
