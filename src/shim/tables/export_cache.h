// The creator's export cache (DESIGN.md, "Endpoint"; SPEC-REFERENCE E.2 (a)): the raw POSIX
// descriptor of each exported allocation, exported once through the driver at ticket time
// and kept here, so the endpoint's peer thread can answer kExport with a dup() without the
// table lock and without calling CUDA. Peers can then import while application threads sit
// in long driver calls, and two processes importing from each other never deadlock.
// Its own small lock; lock order: table before cache (never the other way).
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/protocol.h"
#include "common/ticket.h"

namespace cusnap::shim {

class ExportCache {
 public:
  /// Stores `fd` (taking ownership; marked close-on-exec) as the descriptor of object
  /// (`kind`, `local_id`) of `size` bytes. When one is cached already, `fd` is closed and the
  /// cached one kept.
  void Put(TicketKind kind, uint64_t local_id, int fd, uint64_t size);

  /// True when (`kind`, `local_id`) has a descriptor.
  bool Contains(TicketKind kind, uint64_t local_id) const;

  /// A dup (close-on-exec) of the cached descriptor, and the object's size in `*size`;
  /// -1 with errno ENOENT when none is cached, or dup's errno.
  int Dup(TicketKind kind, uint64_t local_id, uint64_t* size) const;

  /// Remembers that process `pid` (started at `start_time`) fetched a descriptor of
  /// (`kind`, `local_id`) (the peer thread, after a kExport reply). At most
  /// proto::kMaxImportersPerObject per object: when full, importers that died (or whose pid
  /// now names another process) are forgotten first; false when it is still full and `pid`
  /// was not remembered. Reads /proc only when full.
  bool NoteImporter(TicketKind kind, uint64_t local_id, int pid, uint64_t start_time);

  /// The importers of every cached object that are still alive with the same start time, as
  /// INSPECT reports them (ids named by `self`, the creator). Reads /proc once per importer,
  /// outside the lock.
  std::vector<proto::Importer> LiveImporters(const ProcessIdentity& self) const;

  /// Legacy IPC (issue 14): unicast allocation `local_id` was given out in a CUipcMemHandle
  /// carrying `secret`; from now on only requests with that secret, or from a process one was
  /// served to before (its re-import at restore), get its descriptor. Kept across Clear().
  void GuardWithIpcSecret(uint64_t local_id, const proto::IpcSecret& secret);

  /// Whether process `pid` (started at `start_time`) asking for (`kind`, `local_id`) with
  /// `secret` may be served: yes when no IPC secret guards it, when `secret` is the one (the
  /// process is then remembered), or when it was served before.
  bool AdmitExport(TicketKind kind, uint64_t local_id, const proto::IpcSecret& secret, int pid,
                   uint64_t start_time);

  /// Closes and forgets the descriptor of (`kind`, `local_id`), if any (the allocation is
  /// gone: its tickets die with it), and its IPC guard.
  void Invalidate(TicketKind kind, uint64_t local_id);

  /// Closes and forgets every descriptor (lifecycle: release before checkpoint).
  void Clear();

  /// Fork child only, with the cache lock held by the forking thread since prepare: closes
  /// the inherited descriptors (they are the shim's own, not the child's to keep) without
  /// taking the lock. Frees nothing through CUDA.
  void CloseInheritedAfterFork();

  size_t size() const;

  std::mutex& mutex() { return mutex_; }

 private:
  static uint64_t Key(TicketKind kind, uint64_t local_id) {
    return (static_cast<uint64_t>(kind) << 62) ^ local_id;
  }
  mutable std::mutex mutex_;
  struct Entry {
    int fd;
    uint64_t size;
    TicketKind kind;
    uint64_t local_id;
    /// (pid, start time) of each process that fetched a descriptor of it.
    std::vector<std::pair<int, uint64_t>> importers{};
  };
  std::unordered_map<uint64_t, Entry> fds_;
  /// IPC-guarded unicast allocations: the secret and the processes it admitted.
  struct Guard {
    proto::IpcSecret secret;
    std::vector<std::pair<int, uint64_t>> admitted{};
  };
  std::unordered_map<uint64_t, Guard> guards_;  // by local id
};

}  // namespace cusnap::shim
