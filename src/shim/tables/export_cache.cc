#include "shim/tables/export_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace cusnap::shim {
namespace {

// Whether importer `pid` (started at `start_time`) has exited. One this process cannot look
// up (no descriptor free to read /proc) counts as live: a checkpoint must still see it.
bool Gone(int pid, uint64_t start_time) {
  Result<uint64_t> now = ProcessStartTimeOrShortage(pid);
  return now.ok() && *now != start_time;
}

}  // namespace

void ExportCache::Put(TicketKind kind, uint64_t local_id, int fd, uint64_t size) {
  // The driver's descriptor may lack close-on-exec; an exec'd program must not inherit it.
  const int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  std::lock_guard lock(mutex_);
  if (!fds_.emplace(Key(kind, local_id), Entry{fd, size, kind, local_id}).second) close(fd);
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

bool ExportCache::NoteImporter(TicketKind kind, uint64_t local_id, int pid,
                               uint64_t start_time) {
  std::lock_guard lock(mutex_);
  auto it = fds_.find(Key(kind, local_id));
  if (it == fds_.end()) return true;  // released meanwhile: its importers no longer matter
  auto& importers = it->second.importers;
  const std::pair<int, uint64_t> importer{pid, start_time};
  if (std::find(importers.begin(), importers.end(), importer) != importers.end()) return true;
  if (importers.size() >= proto::kMaxImportersPerObject) {
    std::erase_if(importers, [](const auto& known) { return Gone(known.first, known.second); });
  }
  if (importers.size() >= proto::kMaxImportersPerObject) return false;
  importers.push_back(importer);
  return true;
}

std::vector<proto::Importer> ExportCache::LiveImporters(const ProcessIdentity& self) const {
  std::vector<proto::Importer> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, entry] : fds_) {
      for (const auto& [pid, start] : entry.importers) {
        proto::Importer importer{};
        importer.id = proto::ObjectId{self.pid, 0, self.start_time, entry.local_id};
        importer.kind = static_cast<uint32_t>(entry.kind);
        importer.pid = pid;
        importer.start_time = start;
        all.push_back(importer);
      }
    }
  }
  std::erase_if(all, [](const proto::Importer& importer) {
    return Gone(importer.pid, importer.start_time);
  });
  return all;
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
