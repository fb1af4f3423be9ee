// Multicast hooks (SPEC-REFERENCE C.2): cuMulticastCreate with the POSIX descriptor handle
// type gives a logical handle over a tracked object (multicast_table.h); AddDevice, the
// binds (both ABIs of BindMem and BindAddr; the device-explicit ones from CUDA 13.1) and
// Unbind are recorded after the driver accepted them; mapping, access, retain, release and
// properties of multicast handles arrive here from vmm.cc (multicast_vmm.h). Objects created
// with other handle types pass through untracked.
//
// No shim lock is held across a driver call: binds and cuMemMap of a multicast object wait
// until every device of the team was added (CUDA Driver API, cuMulticastAddDevice; SPEC-
// REFERENCE K.3 #3), and may wait for other processes. Objects and members are pinned
// instead, so their real handles stay valid meanwhile.
#include <optional>
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

namespace cusnap::shim {
namespace {

CUcontext CurrentContext() {
  CUcontext context = nullptr;
  if (auto get = driver().cuCtxGetCurrent) get(&context);
  return context;
}

/// Pins a multicast object for one hook (RAII), as PinScope does for allocations.
class MulticastPinScope {
 public:
  explicit MulticastPinScope(uint64_t logical) : pinned_(multicast_table().Pin(logical)) {}
  ~MulticastPinScope() {
    if (!pinned_) return;
    if (auto dropped = multicast_table().Unpin(pinned_->key)) ReleaseDropped(*dropped, TicketKind::kMulticast);
  }
  MulticastPinScope(const MulticastPinScope&) = delete;
  MulticastPinScope& operator=(const MulticastPinScope&) = delete;
  explicit operator bool() const { return pinned_.has_value(); }
  const MulticastPinned* operator->() const { return &*pinned_; }

 private:
  std::optional<MulticastPinned> pinned_;
};

// The tracked allocation mapped over [address, address+size), as a member: its id and the
// offset of `address` in it. nullopt when no single tracked mapping holds the whole range.
struct TrackedMember {
  proto::ObjectId id{};
  uint64_t offset = 0;
  int device = -1;  // the allocation's location when it is a device
};

std::optional<TrackedMember> MemberAt(CUdeviceptr address, size_t size) {
  for (const MappingInfo& m : table().Mappings()) {
    if (address < m.address || address - m.address >= m.size) continue;
    if (size > m.size - (address - m.address)) return std::nullopt;  // runs past the mapping
    for (const AllocationInfo& a : table().Allocations()) {
      if (a.key != m.key) continue;
      const int device =
          a.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? a.prop.location.id : -1;
      return TrackedMember{a.id, m.offset + (address - m.address), device};
    }
  }
  return std::nullopt;
}

// Records a bind the driver accepted.
void RecordBind(MulticastKey key, const MulticastBinding& binding) {
  multicast_table().AddBinding(key, binding);
}

// The device a v1 BindAddr binds for: the current context's (CUDA Driver API,
// cuMulticastBindAddr).
int CurrentDevice() {
  CUdevice device = -1;
  if (auto get = driver().cuCtxGetDevice) get(&device);
  return device;
}

// BindMem, either ABI (`api` 1: `dev` unused, the member's own device).
template <typename Call>
CUresult BindMem(CUmemGenericAllocationHandle mcHandle, int api, CUdevice dev, size_t mcOffset,
                 CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                 unsigned long long flags, Call call) {
  if (!IsTagged(mcHandle)) {
    if (IsTagged(memHandle)) {
      PinScope member(memHandle);
      if (!member) return call(mcHandle, memHandle);  // unknown: the driver's answer
      if (!member->has_real) return CUDA_ERROR_NOT_READY;
      return call(mcHandle, member->real);  // untracked object, tracked member
    }
    return call(mcHandle, memHandle);
  }
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(mcHandle);
  if (!object) return call(mcHandle, memHandle);  // released or unknown: the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  MulticastBinding binding;
  binding.mc_offset = mcOffset;
  binding.size = size;
  binding.flags = flags;
  binding.kind = BindKind::kMem;
  binding.api = static_cast<uint32_t>(api);
  binding.context = CurrentContext();
  binding.device = dev;
  if (IsTagged(memHandle)) {
    PinScope member(memHandle);
    if (!member) return call(object->real, memHandle);  // unknown member: the driver's answer
    if (!member->has_real) return CUDA_ERROR_NOT_READY;
    const CUresult rc = call(object->real, member->real);
    if (rc != CUDA_SUCCESS) return rc;
    binding.tracked_member = true;
    binding.member = member->id;
    binding.member_offset = memOffset;
    if (api == 1) {
      for (const AllocationInfo& a : table().Allocations()) {
        if (a.key == member->key) binding.device = a.prop.location.id;
      }
    }
    table().MarkShared(member->key, nullptr);
    RecordBind(object->key, binding);
    return CUDA_SUCCESS;
  }
  const CUresult rc = call(object->real, memHandle);
  if (rc != CUDA_SUCCESS) return rc;
  binding.untracked_member = memHandle;
  binding.member_offset = memOffset;
  if (api == 1) {
    CUmemAllocationProp prop{};
    if (auto get = driver().cuMemGetAllocationPropertiesFromHandle) get(&prop, memHandle);
    binding.device = prop.location.id;
  }
  RecordBind(object->key, binding);
  return CUDA_SUCCESS;
}

// BindAddr, either ABI (`api` 1: the current context's device).
template <typename Call>
CUresult BindAddr(CUmemGenericAllocationHandle mcHandle, int api, CUdevice dev, size_t mcOffset,
                  CUdeviceptr memptr, size_t size, unsigned long long flags, Call call) {
  if (!IsTagged(mcHandle)) return call(mcHandle);
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(mcHandle);
  if (!object) return call(mcHandle);  // released or unknown: the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  const CUresult rc = call(object->real);
  if (rc != CUDA_SUCCESS) return rc;
  MulticastBinding binding;
  binding.mc_offset = mcOffset;
  binding.size = size;
  binding.flags = flags;
  binding.kind = BindKind::kAddr;
  binding.api = static_cast<uint32_t>(api);
  binding.address = memptr;
  binding.context = CurrentContext();
  binding.device = api == 1 ? CurrentDevice() : dev;
  // A tracked range is recorded as its member allocation too (the coordinator checks it is
  // rebuilt); an untracked range only by its VA (native checkpoint keeps private memory at
  // its address).
  if (std::optional<TrackedMember> member = MemberAt(memptr, size)) {
    binding.tracked_member = true;
    binding.member = member->id;
    binding.member_offset = member->offset;
  }
  RecordBind(object->key, binding);
  return CUDA_SUCCESS;
}

CUresult RefusePartialMulticast(const char* call, CUdeviceptr ptr, size_t size) {
  CUSNAP_LOG_ERROR("%s(0x%llx, %zu bytes): the range cuts through a multicast mapping, or "
                   "covers unicast and multicast mappings together; it must cover whole "
                   "multicast mappings only",
                   call, static_cast<unsigned long long>(ptr), size);
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult MulticastMap(CUdeviceptr ptr, size_t size, size_t offset, uint64_t handle,
                      unsigned long long flags) {
  auto real_map = driver().cuMemMap;
  if (real_map == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(handle);
  if (!object) return real_map(ptr, size, offset, handle, flags);  // the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  // May wait for the whole team (no lock held).
  const CUresult rc = real_map(ptr, size, offset, object->real, flags);
  if (rc != CUDA_SUCCESS) return rc;
  if (!multicast_table().AddMapping(ptr, size, offset, flags, object->key, handle)) {
    CUSNAP_LOG_ERROR("cuMemMap(0x%llx, %zu bytes) of %s succeeded but overlaps a tracked "
                     "multicast mapping; it is not tracked",
                     static_cast<unsigned long long>(ptr), size,
                     DescribeObject(object->id, "multicast object").c_str());
  }
  return CUDA_SUCCESS;
}

CUresult MulticastUnmap(CUdeviceptr ptr, size_t size) {
  auto real_unmap = driver().cuMemUnmap;
  if (real_unmap == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (table().Classify(ptr, size) != RangeMatch::kNone) {
    return RefusePartialMulticast("cuMemUnmap", ptr, size);
  }
  CUSNAP_QUIESCE_GATE();
  const CUresult rc = real_unmap(ptr, size);
  if (rc != CUDA_SUCCESS) return rc;
  for (const MulticastDropped& d : multicast_table().RemoveMappings(ptr, size)) {
    ReleaseDropped(d, TicketKind::kMulticast);
  }
  return CUDA_SUCCESS;
}

CUresult MulticastSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                            size_t count) {
  auto real_set = driver().cuMemSetAccess;
  if (real_set == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (table().Classify(ptr, size) != RangeMatch::kNone) {
    return RefusePartialMulticast("cuMemSetAccess", ptr, size);
  }
  CUSNAP_QUIESCE_GATE();
  if (!multicast_table().AccessFits(ptr, size, desc, count)) {
    CUSNAP_LOG_ERROR("cuMemSetAccess(0x%llx, %zu bytes): more than %u locations on one "
                     "multicast mapping", static_cast<unsigned long long>(ptr), size,
                     proto::kMaxAccess);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // Recorded only when the driver accepted it: a rejected call (bad flags, an unknown device)
  // changed nothing (the driver validates every descriptor before applying any).
  const CUresult rc = real_set(ptr, size, desc, count);
  if (rc == CUDA_SUCCESS) multicast_table().MergeAccess(ptr, size, desc, count);
  return rc;
}

CUresult MulticastRelease(uint64_t handle) {
  CUSNAP_QUIESCE_GATE();
  std::optional<MulticastDropped> dropped;
  if (!multicast_table().ReleaseHandle(handle, &dropped)) {
    // Released already, or never ours: whatever the driver says of such a value.
    auto real_release = driver().cuMemRelease;
    return real_release != nullptr ? real_release(handle) : CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dropped) ReleaseDropped(*dropped, TicketKind::kMulticast);
  return CUDA_SUCCESS;
}

CUresult MulticastRetain(CUmemGenericAllocationHandle* handle, CUdeviceptr address) {
  CUSNAP_QUIESCE_GATE();
  std::optional<uint64_t> logical = multicast_table().RetainAt(address);
  if (!logical) return CUDA_ERROR_INVALID_VALUE;
  *handle = *logical;
  return CUDA_SUCCESS;
}

CUresult MulticastAllocationProperties(CUmemAllocationProp* prop, uint64_t handle) {
  auto real_get = driver().cuMemGetAllocationPropertiesFromHandle;
  if (real_get == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(handle);
  if (!object) return real_get(prop, handle);  // released or unknown: the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  return real_get(prop, object->real);
}

namespace hook {

CUresult cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle, const CUmulticastObjectProp* prop) {
  auto real = driver().cuMulticastCreate;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (mcHandle == nullptr || prop == nullptr ||
      (prop->handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return real(mcHandle, prop);  // the driver's answer; not shareable as a descriptor: untracked
  }
  CUSNAP_QUIESCE_GATE();
  // The caller's own output: a failed call leaves in it exactly what the driver left
  // (writing 0 there would change what the application sees).
  const CUresult rc = real(mcHandle, prop);
  if (rc != CUDA_SUCCESS) return rc;
  const CUmemGenericAllocationHandle created = *mcHandle;
  if (IsTagged(created)) return RefuseTaggedRealHandle(created, "cuMulticastCreate");
  const uint64_t logical = multicast_table().AddCreated(
      created, MulticastProperties::FromDriver(*prop), CurrentContext(), SelfIdentity());
  if (logical == 0) {
    if (auto release = driver().cuMemRelease) release(created);
    CUSNAP_LOG_ERROR("cuMulticastCreate: logical handles exhausted; released the object");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *mcHandle = logical;
  return CUDA_SUCCESS;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  auto real = driver().cuMulticastAddDevice;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!IsTagged(mcHandle)) return real(mcHandle, dev);
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(mcHandle);
  if (!object) return real(mcHandle, dev);  // released or unknown: the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  const CUresult rc = real(object->real, dev);
  if (rc == CUDA_SUCCESS) multicast_table().AddDevice(object->key, dev);
  return rc;
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindMem;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return BindMem(mcHandle, 1, -1, mcOffset, memHandle, memOffset, size, flags,
                 [&](CUmemGenericAllocationHandle mc, CUmemGenericAllocationHandle mem) {
                   return real(mc, mcOffset, mem, memOffset, size, flags);
                 });
}

CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindMem_v2;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return BindMem(mcHandle, 2, dev, mcOffset, memHandle, memOffset, size, flags,
                 [&](CUmemGenericAllocationHandle mc, CUmemGenericAllocationHandle mem) {
                   return real(mc, dev, mcOffset, mem, memOffset, size, flags);
                 });
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindAddr;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return BindAddr(mcHandle, 1, -1, mcOffset, memptr, size, flags,
                  [&](CUmemGenericAllocationHandle mc) { return real(mc, mcOffset, memptr, size, flags); });
}

CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUdeviceptr memptr, size_t size, unsigned long long flags) {
  auto real = driver().cuMulticastBindAddr_v2;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return BindAddr(mcHandle, 2, dev, mcOffset, memptr, size, flags, [&](CUmemGenericAllocationHandle mc) {
    return real(mc, dev, mcOffset, memptr, size, flags);
  });
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  auto real = driver().cuMulticastUnbind;
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!IsTagged(mcHandle)) return real(mcHandle, dev, mcOffset, size);
  CUSNAP_QUIESCE_GATE();
  MulticastPinScope object(mcHandle);
  if (!object) return real(mcHandle, dev, mcOffset, size);  // the driver's answer
  if (!object->has_real) return CUDA_ERROR_NOT_READY;
  const CUresult rc = real(object->real, dev, mcOffset, size);
  if (rc == CUDA_SUCCESS) multicast_table().RemoveBinding(object->key, dev, mcOffset, size);
  return rc;
}

CUresult cuMulticastGetGranularity(size_t * granularity, const CUmulticastObjectProp *prop, CUmulticastGranularity_flags option) {
  auto real = driver().cuMulticastGetGranularity;
  return real ? real(granularity, prop, option) : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace hook
}  // namespace cusnap::shim
