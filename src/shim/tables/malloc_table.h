// The process's legacy-memory table: the cuMemAlloc / cuMemAllocPitch allocations
// the shim serves from VMM allocations of its own (each a tracked allocation of the sharing
// table, mapped at a VA the shim reserved; the application never sees its logical handle),
// the legacy IPC secret of each one exported with cuIpcGetMemHandle, the memory this process
// opened with cuIpcOpenMemHandle (mapped at a VA the shim keeps across checkpoint and
// restore), and which legacy APIs cusnap cannot carry the process used (named by the
// checkpoint's refusal). It makes no driver calls; its own small lock, never held across one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"

namespace cusnap::shim {

/// One cuMemAlloc served by the shim.
struct MallocEntry {
  CUdeviceptr base = 0;
  size_t size = 0;          ///< bytes mapped and reserved (the request rounded to the granularity)
  uint64_t logical = 0;     ///< the tracked allocation's logical handle (never shown)
  proto::ObjectId id{};     ///< its identity (what an IPC handle names)
  int device = 0;           ///< ordinal it was allocated on
};

/// One handle opened here with cuIpcOpenMemHandle (CUDA counts opens of one handle).
struct IpcOpenEntry {
  CUdeviceptr base = 0;
  size_t size = 0;
  proto::ObjectId id{};
  unsigned refs = 0;
};

class MallocTable {
 public:
  /// Records a served allocation.
  void Add(const MallocEntry& entry);
  /// The allocation `ptr` falls in (anywhere in [base, base+size)), if the shim serves it.
  std::optional<MallocEntry> Find(CUdeviceptr ptr) const;
  /// Whether `ptr` is in a served allocation or in memory opened here from a legacy IPC handle.
  bool Serves(CUdeviceptr ptr) const;
  /// Forgets the allocation based at `base`.
  void Remove(CUdeviceptr base);

  /// The open of allocation `id` here, one more reference on it, if it was opened before.
  std::optional<CUdeviceptr> Reopen(const proto::ObjectId& id);
  /// Records the first open of `id`, mapped at [base, base+size).
  void AddOpen(const IpcOpenEntry& entry);
  /// One reference fewer on the open mapped at exactly `base`: nullopt when there is none,
  /// else the entry, with refs 0 when that was the last (it is then forgotten).
  std::optional<IpcOpenEntry> CloseOpen(CUdeviceptr base);

  /// Notes that the process called `api` (an entry point whose memory cusnap cannot carry).
  void NoteUnsupported(const char* api);
  /// Those entry points, in the order first called.
  std::vector<std::string> Unsupported() const;

 private:
  mutable std::mutex mutex_;
  std::map<CUdeviceptr, MallocEntry> mallocs_;  // by base
  std::map<CUdeviceptr, IpcOpenEntry> opens_;   // by base
  std::vector<std::string> unsupported_;
};

}  // namespace cusnap::shim
