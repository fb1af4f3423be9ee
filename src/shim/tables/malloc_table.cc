// The legacy-memory table (malloc_table.h).
#include "shim/tables/malloc_table.h"

#include <algorithm>

namespace cusnap::shim {
namespace {

// The entry of `entries` (by base) whose [base, base+size) holds `ptr`, or nullptr.
template <typename Map>
auto Containing(Map& entries, CUdeviceptr ptr) -> decltype(&entries.begin()->second) {
  auto it = entries.upper_bound(ptr);
  if (it == entries.begin()) return nullptr;
  --it;
  return ptr < it->second.base + it->second.size ? &it->second : nullptr;
}

bool SameObject(const proto::ObjectId& a, const proto::ObjectId& b) {
  return a.creator_pid == b.creator_pid && a.creator_start == b.creator_start && a.local_id == b.local_id;
}

}  // namespace

void MallocTable::Add(const MallocEntry& entry) {
  std::lock_guard lock(mutex_);
  mallocs_[entry.base] = entry;
}

std::optional<MallocEntry> MallocTable::Find(CUdeviceptr ptr) const {
  std::lock_guard lock(mutex_);
  if (const MallocEntry* found = Containing(mallocs_, ptr)) return *found;
  return std::nullopt;
}

bool MallocTable::Serves(CUdeviceptr ptr) const {
  std::lock_guard lock(mutex_);
  return Containing(mallocs_, ptr) != nullptr || Containing(opens_, ptr) != nullptr;
}

void MallocTable::Remove(CUdeviceptr base) {
  std::lock_guard lock(mutex_);
  mallocs_.erase(base);
}

std::optional<CUdeviceptr> MallocTable::Reopen(const proto::ObjectId& id) {
  std::lock_guard lock(mutex_);
  for (auto& [base, open] : opens_) {
    if (!SameObject(open.id, id)) continue;
    ++open.refs;
    return base;
  }
  return std::nullopt;
}

void MallocTable::AddOpen(const IpcOpenEntry& entry) {
  std::lock_guard lock(mutex_);
  opens_[entry.base] = entry;
}

std::optional<IpcOpenEntry> MallocTable::CloseOpen(CUdeviceptr base) {
  std::lock_guard lock(mutex_);
  auto it = opens_.find(base);
  if (it == opens_.end()) return std::nullopt;
  IpcOpenEntry entry = it->second;
  entry.refs = --it->second.refs;
  if (entry.refs == 0) opens_.erase(it);
  return entry;
}

void MallocTable::NoteUnsupported(const char* api) {
  std::lock_guard lock(mutex_);
  if (std::find(unsupported_.begin(), unsupported_.end(), api) == unsupported_.end()) unsupported_.emplace_back(api);
}

std::vector<std::string> MallocTable::Unsupported() const {
  std::lock_guard lock(mutex_);
  return unsupported_;
}

}  // namespace cusnap::shim
