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
#include "shim/intercept/driver_api.h"
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
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUSNAP_REAL(cuMemCreate);
  const bool tracked =
      prop != nullptr && (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  if (!tracked) {
    CUmemGenericAllocationHandle real = 0;
    const CUresult rc = real_cuMemCreate(&real, size, prop, flags);
    if (rc != CUDA_SUCCESS) return rc;
    if (IsTagged(real)) return RefuseTaggedRealHandle(real, "cuMemCreate");
    *handle = real;
    return CUDA_SUCCESS;
  }
  EnsureEndpoint();
  CUSNAP_QUIESCE_GATE();
  CUmemGenericAllocationHandle real = 0;
  const CUresult rc = real_cuMemCreate(&real, size, prop, flags);
  if (rc != CUDA_SUCCESS) return rc;
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
    EnsureEndpoint();
    CUSNAP_QUIESCE_GATE();
    std::optional<Dropped> dropped;
    if (!table().ReleaseHandle(handle, &dropped)) return CUDA_ERROR_INVALID_HANDLE;
    if (dropped) ReleaseDropped(*dropped);
    return CUDA_SUCCESS;
  }
  CUSNAP_REAL(cuMemRelease);
  const CUresult rc = real_cuMemRelease(handle);
  if (rc == CUDA_SUCCESS) table().ForgetUntrackedImport(handle);
  return rc;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto address = reinterpret_cast<CUdeviceptr>(addr);
  if (multicast_table().Classify(address, 1) != RangeMatch::kNone) {  // multicast
    return MulticastRetain(handle, address);
  }
  if (table().Classify(address, 1) != RangeMatch::kNone) {
    // Hot path (PyTorch retains every mapped block): a range lookup, no driver call.
    EnsureEndpoint();
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
  EnsureEndpoint();
  CUSNAP_QUIESCE_GATE();
  PinScope pin(handle);
  if (!pin) return CUDA_ERROR_INVALID_HANDLE;
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
  EnsureEndpoint();
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
  EnsureEndpoint();
  CUSNAP_QUIESCE_GATE();
  if (!table().AccessFits(ptr, size, desc, count)) {
    CUSNAP_LOG_ERROR("cuMemSetAccess(0x%llx, %zu bytes): more than %u locations on one tracked "
                     "mapping", static_cast<unsigned long long>(ptr), size, proto::kMaxAccess);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const CUresult rc = real_cuMemSetAccess(ptr, size, desc, count);
  if (rc == CUDA_SUCCESS) {
    table().MergeAccess(ptr, size, desc, count);
  } else {
    table().MarkAccessUnknown(ptr, size);  // the driver may have applied part of it
  }
  return rc;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  CUSNAP_REAL(cuMemGetAccess);
  return real_cuMemGetAccess(flags, location, ptr);
}

CUresult cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags) {
  if (shareableHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!IsTagged(handle)) {
    CUSNAP_REAL(cuMemExportToShareableHandle);
    return real_cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags);
  }
  EnsureEndpoint();
  CUSNAP_QUIESCE_GATE();
  if (!table().Knows(handle) && !multicast_table().Knows(handle)) {  // multicast
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    // Another kind of shareable handle would hand out the allocation behind cusnap's back.
    CUSNAP_LOG_ERROR("cuMemExportToShareableHandle: handle type %d of a tracked allocation is "
                     "not supported (only POSIX file descriptors)", static_cast<int>(handleType));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return ExportTicket(handle, static_cast<int*>(shareableHandle));
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                        CUmemAllocationHandleType shHandleType) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    CUSNAP_REAL(cuMemImportFromShareableHandle);
    CUmemGenericAllocationHandle real = 0;
    const CUresult rc = real_cuMemImportFromShareableHandle(&real, osHandle, shHandleType);
    if (rc != CUDA_SUCCESS) return rc;
    if (IsTagged(real)) return RefuseTaggedRealHandle(real, "cuMemImportFromShareableHandle");
    RecordUntrackedImport(real, shHandleType);
    *handle = real;
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
  if (!IsTagged(handle)) return real_cuMemGetAllocationPropertiesFromHandle(prop, handle);
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (IsMulticastHandle(handle)) return MulticastAllocationProperties(prop, handle);  // multicast
  CUSNAP_QUIESCE_GATE();
  if (auto imported = table().ImportedProperties(handle)) {
    *prop = *imported;  // stable across restores onto other GPUs (sharing_table.h)
    return CUDA_SUCCESS;
  }
  PinScope pin(handle);
  if (!pin) return CUDA_ERROR_INVALID_HANDLE;
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
