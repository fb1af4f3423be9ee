#include "shim/tables/export_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace cusnap::shim {

void ExportCache::Put(TicketKind kind, uint64_t local_id, int fd, uint64_t size) {
  // The driver's descriptor may lack close-on-exec; an exec'd program must not inherit it.
  const int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  std::lock_guard lock(mutex_);
  if (!fds_.emplace(Key(kind, local_id), Entry{fd, size}).second) close(fd);
}

bool ExportCache::Contains(TicketKind kind, uint64_t local_id) const {
  std::lock_guard lock(mutex_);
  return fds_.count(Key(kind, local_id)) != 0;
}

int ExportCache::Dup(TicketKind kind, uint64_t local_id, uint64_t* size) const {
  std::lock_guard lock(mutex_);
  auto it = fds_.find(Key(kind, local_id));
  if (it == fds_.end()) {
    errno = ENOENT;
    return -1;
  }
  *size = it->second.size;
  return fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
}

void ExportCache::Invalidate(TicketKind kind, uint64_t local_id) {
  std::lock_guard lock(mutex_);
  auto it = fds_.find(Key(kind, local_id));
  if (it == fds_.end()) return;
  close(it->second.fd);
  fds_.erase(it);
}

void ExportCache::Clear() {
  std::lock_guard lock(mutex_);
  for (const auto& [key, entry] : fds_) close(entry.fd);
  fds_.clear();
}

void ExportCache::CloseInheritedAfterFork() {
  for (const auto& [key, entry] : fds_) close(entry.fd);
  fds_.clear();
}

size_t ExportCache::size() const {
  std::lock_guard lock(mutex_);
  return fds_.size();
}

}  // namespace cusnap::shim
