// Live untracked imports (DESIGN.md, "Tickets"): allocations this process imported from a
// descriptor that is not a cusnap ticket. The checkpoint is refused while one is live, and
// the refusal names each one, so this keeps what names it: the real handle, the location the
// driver reported at import, the kind of shareable handle it came from, and every VA range
// it is mapped at.
//
// Driver semantics followed (CUDA Driver API, "Virtual Memory Management": cuMemRelease,
// cuMemUnmap): an allocation lives while a handle or a mapping references it. An entry
// therefore lives until its last reference (the import and each retain, each ended by one
// cuMemRelease) and its last mapping are gone: NCCL-style code maps an import and releases
// the handle at once, and that memory is still shared.
//
// No locking and no driver calls: the sharing table (sharing_table.h) owns one and calls it
// under its own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "common/protocol.h"
#include "shim/driver/cuda_abi.h"
#include "shim/tables/mapping_index.h"

namespace cusnap::shim {

/// One VA range an untracked import is mapped at.
struct UntrackedMapping {
  CUdeviceptr address = 0;
  size_t size = 0;    ///< bytes
  size_t offset = 0;  ///< bytes into the allocation
  CUmemGenericAllocationHandle real = 0;
};

class UntrackedImports {
 public:
  /// Records one reference on `real`, returned by a non-ticket import of shareable handle
  /// type `type` (a repeated import of an allocation already here adds a reference). `prop`
  /// is the driver's cuMemGetAllocationPropertiesFromHandle answer at import, null when it
  /// gave none.
  void AddImport(CUmemGenericAllocationHandle real, const CUmemAllocationProp* prop,
                 CUmemAllocationHandleType type);

  /// cuMemRetainAllocationHandle returned `real`: one more reference when it is a live
  /// untracked import (a retain inside its mapping works after its handle was released).
  void Retain(CUmemGenericAllocationHandle real);

  /// The driver released handle `real`: one reference less when it holds one.
  void Release(CUmemGenericAllocationHandle real);

  /// The driver mapped [address, address+size) at `offset` bytes of handle `real`: recorded
  /// when `real` is a held untracked import (a value whose references are all released
  /// names some other allocation now).
  void AddMapping(CUdeviceptr address, size_t size, size_t offset,
                  CUmemGenericAllocationHandle real);

  /// The driver unmapped [address, address+size): forgets the untracked mappings inside it.
  void RemoveMappings(CUdeviceptr address, size_t size);

  /// Live untracked imports (allocations, not references).
  size_t size() const { return imports_.size(); }

  /// kIdentify's kUntrackedImport records (protocol.h) of the first `max_imports` imports in
  /// handle order: one per mapping in address order, or one with address 0 when unmapped.
  std::vector<proto::Record> Records(size_t max_imports) const;

 private:
  struct Import {
    uint32_t references = 0;
    uint32_t mappings = 0;
    bool prop_known = false;
    CUmemAllocationProp prop{};
    CUmemAllocationHandleType type{};
  };
  using ImportMap = std::map<CUmemGenericAllocationHandle, Import>;  // ordered: stable records

  void DropIfUnused(ImportMap::iterator it);

  ImportMap imports_;
  MappingIndex<UntrackedMapping> mappings_;
};

}  // namespace cusnap::shim
