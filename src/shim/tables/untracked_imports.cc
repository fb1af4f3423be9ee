// Live untracked imports and their mappings (untracked_imports.h).
#include "shim/tables/untracked_imports.h"

#include <cstring>

namespace cusnap::shim {

void UntrackedImports::AddImport(CUmemGenericAllocationHandle real,
                                 const CUmemAllocationProp* prop,
                                 CUmemAllocationHandleType type) {
  Import& import = imports_[real];
  ++import.references;
  import.type = type;
  if (prop != nullptr) {
    import.prop = *prop;
    import.prop_known = true;
  }
}

void UntrackedImports::Retain(CUmemGenericAllocationHandle real) {
  auto it = imports_.find(real);
  if (it != imports_.end()) ++it->second.references;
}

void UntrackedImports::Release(CUmemGenericAllocationHandle real) {
  auto it = imports_.find(real);
  if (it == imports_.end() || it->second.references == 0) return;
  --it->second.references;
  DropIfUnused(it);
}

void UntrackedImports::AddMapping(CUdeviceptr address, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle real) {
  auto it = imports_.find(real);
  if (it == imports_.end() || it->second.references == 0) return;
  // The driver just mapped this range, so any mapping still recorded inside it is stale.
  RemoveMappings(address, size);
  if (mappings_.Add(UntrackedMapping{address, size, offset, real})) ++it->second.mappings;
}

void UntrackedImports::RemoveMappings(CUdeviceptr address, size_t size) {
  mappings_.RemoveInside(address, size, [&](const UntrackedMapping& removed) {
    auto it = imports_.find(removed.real);
    if (it == imports_.end()) return;
    --it->second.mappings;
    DropIfUnused(it);
  });
}

void UntrackedImports::DropIfUnused(ImportMap::iterator it) {
  if (it->second.references == 0 && it->second.mappings == 0) imports_.erase(it);
}

std::vector<proto::Record> UntrackedImports::Records(size_t max_imports) const {
  std::vector<proto::Record> records;
  size_t reported = 0;
  for (const auto& [real, import] : imports_) {
    if (reported++ == max_imports) break;
    proto::Record record;
    std::memset(&record, 0, sizeof record);
    record.kind = static_cast<uint32_t>(proto::RecordKind::kUntrackedImport);
    record.flags = proto::kShared | (import.references > 0 ? proto::kHandleLive : 0u);
    record.id.local_id = real;
    if (import.prop_known) {
      record.alloc_type = static_cast<int32_t>(import.prop.type);
      record.location_type = static_cast<int32_t>(import.prop.location.type);
      record.location_id = import.prop.location.id;
    }
    record.handle_types = static_cast<uint32_t>(import.type);
    record.handle_count = import.references;
    if (import.mappings == 0) {
      records.push_back(record);
      continue;
    }
    // A few mappings per import and at most max_imports imports: a scan per import is fine.
    for (const auto& [address, mapping] : mappings_) {
      if (mapping.real != real) continue;
      record.address = mapping.address;
      record.size = mapping.size;
      record.offset = mapping.offset;
      records.push_back(record);
    }
  }
  return records;
}

}  // namespace cusnap::shim
