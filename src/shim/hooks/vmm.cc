// Unicast VMM hooks (DESIGN.md, "Handles"; SPEC-REFERENCE C.1): thin translations between
// the application's view (logical handles, tracked VA ranges) and the real driver, with the
// bookkeeping in the sharing table (process.h) and the sharing itself in ticket_import.h.
// Untracked handles and ranges pass through untouched (an untracked import's references and
// mappings are noted on the way: the checkpoint's refusal names them). Tracked calls enter the quiesce gate
// first (quiesce.h) and start the process's endpoint if a fork child has none yet.
// Multicast logical handles and multicast mappings go to the multicast module
// (multicast_vmm.h), each at the one point below marked "multicast".
#include <cstdint>
#include <vector>

#include "common/ids.h"
#include "common/log.h"
#include "shim/driver/driver_api.h"
#include "shim/tables/handles.h"
#include "shim/hooks/hooks.h"
#include "shim/tables/multicast_table.h"
#include "shim/hooks/multicast_vmm.h"
#include "shim/process.h"
#include "shim/lifecycle/quiesce.h"
#include "shim/hooks/ticket_import.h"

namespace cusnap::shim::hook {
namespace {

CUcontext CurrentContext() {
  CUcontext context = nullptr;
  if (auto get = driver().cuCtxGetCurrent) get(&context);
  return context;
}

void ReleaseAll(const std::vector<Dropped>& dropped) {
  for (const Dropped& d : dropped) ReleaseDropped(d);
}

CUresult RefusePartial(const char* call, CUdeviceptr ptr, size_t size) {
  CUSNAP_LOG_ERROR("%s(0x%llx, %zu bytes): the range cuts through a tracked mapping; it must "
                   "cover whole mappings", call, static_cast<unsigned long long>(ptr), size);
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

#define CUSNAP_REAL(name)                       \
  auto real_##name = driver().name;             \
  if (real_##name == nullptr) return CUDA_ERROR_NOT_INITIALIZED

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  CUSNAP_REAL(cuMemCreate);
  // POSIX-capable allocations must leave the driver before a native checkpoint (they can
  // never be exported again after one, DRIVER-FACTS F3); private ones are tracked too unless
  // CUSNAP_CARRY=shared, so the carrier moves their bytes ~25x faster than the native
  // checkpoint would (DRIVER-FACTS "Speeds").
  const bool tracked = handle != nullptr && prop != nullptr &&
                       ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0 ||
                        carry_scope() == CarryScope::kAll);
  // The caller's own output, so a failed call leaves exactly what the driver left in it.
  if (!tracked) {
    const CUresult rc = real_cuMemCreate(handle, size, prop, flags);
    if (rc == CUDA_SUCCESS && IsTagged(*handle)) return RefuseTaggedRealHandle(*handle, "cuMemCreate");
    return rc;
  }
  CUSNAP_QUIESCE_GATE();
  const CUresult rc = real_cuMemCreate(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) return rc;
  const CUmemGenericAllocationHandle real = *handle;
  const uint64_t logical = table().AddCreated(real, size, *prop, CurrentContext(), SelfIdentity());
  if (logical == 0) {
    if (auto release = driver().cuMemRelease) release(real);
    CUSNAP_LOG_ERROR("cuMemCreate: logical handles exhausted; released the allocation");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  AnticipateCarrier();
  *handle = logical;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (IsMulticastHandle(handle)) return MulticastRelease(handle);  // multicast
  if (IsTagged(handle)) {
    CUSNAP_QUIESCE_GATE();
    std::optional<Dropped> dropped;
    if (!table().ReleaseHandle(handle, &dropped)) {
      // Released already, or never ours: whatever the driver says of such a value (1 for a
      // second release, not the shim's own 400).
      CUSNAP_REAL(cuMemRelease);
      return real_cuMemRelease(handle);
    }
    if (dropped) ReleaseDropped(*dropped);
    return CUDA_SUCCESS;
  }
  CUSNAP_REAL(cuMemRelease);
  const CUresult rc = real_cuMemRelease(handle);
  if (rc == CUDA_SUCCESS) table().ForgetUntrackedImport(handle);
  return rc;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) {
    CUSNAP_REAL(cuMemRetainAllocationHandle);
    return real_cuMemRetainAllocationHandle(handle, addr);  // the driver's answer
  }
  const auto address = reinterpret_cast<CUdeviceptr>(addr);
  if (multicast_table().Classify(address, 1) != RangeMatch::kNone) {  // multicast
    return MulticastRetain(handle, address);
  }
  if (table().Classify(address, 1) != RangeMatch::kNone) {
    // Hot path (PyTorch retains every mapped block): a range lookup, no driver call.
    CUSNAP_QUIESCE_GATE();
    if (std::optional<uint64_t> logical = table().RetainAt(address)) {
      *handle = *logical;
      return CUDA_SUCCESS;
    }
    // Unmapped meanwhile: the driver decides, as for any other address.
  }
  CUSNAP_REAL(cuMemRetainAllocationHandle);
  CUmemGenericAllocationHandle real = 0;
  const CUresult rc = real_cuMemRetainAllocationHandle(&real, addr);
  if (rc != CUDA_SUCCESS) return rc;
  if (IsTagged(real)) return RefuseTaggedRealHandle(real, "cuMemRetainAllocationHandle");
  table().NoteUntrackedRetain(real);
  *handle = real;
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUSNAP_REAL(cuMemMap);
  if (!IsTagged(handle)) {
    const CUresult rc = real_cuMemMap(ptr, size, offset, handle, flags);
    // Names the range in the checkpoint's refusal when `handle` is an untracked import.
    if (rc == CUDA_SUCCESS) table().NoteUntrackedMapping(ptr, size, offset, handle);
    return rc;
  }
  if (IsMulticastHandle(handle)) return MulticastMap(ptr, size, offset, handle, flags);  // multicast
  CUSNAP_QUIESCE_GATE();
  PinScope pin(handle);
  if (!pin) return real_cuMemMap(ptr, size, offset, handle, flags);  // the driver's answer
  if (!pin->has_real) return CUDA_ERROR_NOT_READY;
  const CUresult rc = real_cuMemMap(ptr, size, offset, pin->real, flags);
  if (rc != CUDA_SUCCESS) return rc;
  if (!table().AddMapping(ptr, size, offset, pin->key, handle)) {
    CUSNAP_LOG_ERROR("cuMemMap(0x%llx, %zu bytes) of %s succeeded but overlaps a tracked "
                     "mapping the table still holds; it is not tracked",
                     static_cast<unsigned long long>(ptr), size, DescribeObject(pin->id).c_str());
  }
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUSNAP_REAL(cuMemUnmap);
  switch (multicast_table().Classify(ptr, size)) {  // multicast
    case RangeMatch::kNone:
      break;
    case RangeMatch::kPartial:
      return RefusePartial("cuMemUnmap", ptr, size);
    case RangeMatch::kCovers:
      return MulticastUnmap(ptr, size);
  }
  switch (table().Classify(ptr, size)) {
    case RangeMatch::kNone: {
      const CUresult rc = real_cuMemUnmap(ptr, size);
      if (rc == CUDA_SUCCESS) table().ForgetUntrackedMappings(ptr, size);
      return rc;
    }
    case RangeMatch::kPartial:
      return RefusePartial("cuMemUnmap", ptr, size);
    case RangeMatch::kCovers:
      break;
  }
  CUSNAP_QUIESCE_GATE();
  const CUresult rc = real_cuMemUnmap(ptr, size);
  if (rc != CUDA_SUCCESS) return rc;
  ReleaseAll(table().RemoveMappings(ptr, size));
  table().ForgetUntrackedMappings(ptr, size);  // untracked imports mapped in the same range
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  CUSNAP_REAL(cuMemSetAccess);
  if (desc == nullptr || count == 0) return real_cuMemSetAccess(ptr, size, desc, count);
  switch (multicast_table().Classify(ptr, size)) {  // multicast
    case RangeMatch::kNone:
      break;
    case RangeMatch::kPartial:
      return RefusePartial("cuMemSetAccess", ptr, size);
    case RangeMatch::kCovers:
      return MulticastSetAccess(ptr, size, desc, count);
  }
  switch (table().Classify(ptr, size)) {
    case RangeMatch::kNone:
      return real_cuMemSetAccess(ptr, size, desc, count);
    case RangeMatch::kPartial:
      return RefusePartial("cuMemSetAccess", ptr, size);
    case RangeMatch::kCovers:
      break;
  }
  CUSNAP_QUIESCE_GATE();
  if (!table().AccessFits(ptr, size, desc, count)) {
    CUSNAP_LOG_ERROR("cuMemSetAccess(0x%llx, %zu bytes): more than %u locations on one tracked "
                     "mapping", static_cast<unsigned long long>(ptr), size, proto::kMaxAccess);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // Recorded only when the driver accepted it: a rejected call (bad flags, an unknown device)
  // changed nothing (the driver validates every descriptor before applying any).
  const CUresult rc = real_cuMemSetAccess(ptr, size, desc, count);
  if (rc == CUDA_SUCCESS) table().MergeAccess(ptr, size, desc, count);
  return rc;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  CUSNAP_REAL(cuMemGetAccess);
  return real_cuMemGetAccess(flags, location, ptr);
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags) {
  CUSNAP_REAL(cuMemExportToShareableHandle);
  if (shareableHandle == nullptr || !IsTagged(handle)) {
    return real_cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
  }
  CUSNAP_QUIESCE_GATE();
  if (!table().Knows(handle) && !multicast_table().Knows(handle)) {  // multicast
    return real_cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
  }
  return ExportTicket(handle, shareableHandle, handleType, flags);
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  if (handle == nullptr || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    CUSNAP_REAL(cuMemImportFromShareableHandle);
    const CUresult rc = real_cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (rc != CUDA_SUCCESS) return rc;
    if (IsTagged(*handle)) return RefuseTaggedRealHandle(*handle, "cuMemImportFromShareableHandle");
    RecordUntrackedImport(*handle, shHandleType);
    return CUDA_SUCCESS;
  }
  // The POSIX descriptor travels by value in the pointer (CUDA Driver API,
  // cuMemImportFromShareableHandle).
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  CUSNAP_QUIESCE_GATE();
  return ImportShareable(handle, fd);
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  CUSNAP_REAL(cuMemGetAllocationPropertiesFromHandle);
  if (!IsTagged(handle) || prop == nullptr) {
    return real_cuMemGetAllocationPropertiesFromHandle(prop, handle);  // the driver's answer
  }
  if (IsMulticastHandle(handle)) return MulticastAllocationProperties(prop, handle);  // multicast
  CUSNAP_QUIESCE_GATE();
  if (auto imported = table().ImportedProperties(handle)) {
    *prop = *imported;  // stable across restores onto other GPUs (sharing_table.h)
    return CUDA_SUCCESS;
  }
  PinScope pin(handle);
  if (!pin) return real_cuMemGetAllocationPropertiesFromHandle(prop, handle);  // released/unknown
  if (!pin->has_real) return CUDA_ERROR_NOT_READY;
  return real_cuMemGetAllocationPropertiesFromHandle(prop, pin->real);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  // A tracked mapping answers from the table: the range the application mapped, the same
  // before and after restore (pbase and psize are each optional, CUDA Driver API).
  if (auto range = table().MappingRangeAt(dptr)) {
    if (pbase != nullptr) *pbase = range->first;
    if (psize != nullptr) *psize = range->second;
    return CUDA_SUCCESS;
  }
  CUSNAP_REAL(cuMemGetAddressRange_v2);
  return real_cuMemGetAddressRange_v2(pbase, psize, dptr);
}

#undef CUSNAP_REAL

}  // namespace cusnap::shim::hook
