// The multicast entry points (CUDA Driver API, "Multicast Object Management"): create, add
// devices, bind (both ABIs of BindMem and BindAddr), unbind, granularity. The team lives in
// shared memory (multicast_team.h), so every process holding the object sees the same devices
// and bindings.
//
// Documented behaviour reproduced: all numDevices devices must be added before memory can be
// bound; a bind blocks until they are (bounded here by SIMCUDA_MULTICAST_BIND_TIMEOUT_MS, then
// CUDA_ERROR_TIMEOUT; the real driver waits for ever). Sizes and offsets are multiples of the
// minimum granularity; size + memOffset within the allocation; size + mcOffset within the
// object (its capacity: the requested size, or more under SIMCUDA_MULTICAST_ROUND_BYTES).
// Shareable or imported objects bind only shareable memory. Unbind names exactly one earlier
// bind (device, mcOffset, size).
//
// Choices where CUDA documents no result: a bad handle, an already-added device, a full team,
// an overlapping bind and an unbind that matches no bind give CUDA_ERROR_INVALID_VALUE; memory
// on another device than the one bound, or a device outside the team, CUDA_ERROR_INVALID_DEVICE;
// a team with no free binding slot CUDA_ERROR_OUT_OF_MEMORY.
#include "api_call.h"
#include "config.h"
#include "contexts.h"
#include "devices.h"
#include "multicast.h"
#include "multicast_objects.h"
#include "vmm.h"
#include "vmm_backing.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>

namespace simcuda::multicast {
namespace {

bool aligned(size_t v) { return v % kGranularity == 0; }

// What a bind names: part of an allocation of this process, the device it lives on, and a
// descriptor of its memfd for the team's data path (-1 when the allocation keeps none:
// imported or not exportable).
struct Member {
  uint64_t id = 0;
  size_t offset = 0;
  int device = -1;
  bool shareable = false;
  int fd = -1;
};

Member describe(const vmm::Allocation &a, size_t offset) {
  Member m{a.id, offset, vmm::device_of(a),
           (a.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0, -1};
  if (a.fd >= 0) m.fd = fcntl(a.fd, F_DUPFD_CLOEXEC, 0);
  return m;
}

// The allocation behind `handle` (a unicast allocation of this process), from `offset`.
CUresult member_of_handle(CUmemGenericAllocationHandle handle, size_t offset, size_t size, Member *m) {
  vmm::State &s = vmm::state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end() || it->second->handle_refs == 0 || it->second->multicast) return CUDA_ERROR_INVALID_VALUE;
  const vmm::Allocation &a = *it->second;
  if (offset > a.size || size > a.size - offset) return CUDA_ERROR_INVALID_VALUE;
  *m = describe(a, offset);
  return CUDA_SUCCESS;
}

// The allocation mapped at [ptr, ptr+size) (inside one mapping of a unicast allocation).
CUresult member_of_address(CUdeviceptr ptr, size_t size, Member *m) {
  vmm::State &s = vmm::state();
  std::lock_guard lock(s.mutex);
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  const vmm::Mapping &map = it->second;
  if (ptr + size > map.va + map.size) return CUDA_ERROR_INVALID_VALUE;
  const vmm::Allocation &a = *s.allocations.at(map.handle);
  if (a.multicast) return CUDA_ERROR_INVALID_VALUE;
  *m = describe(a, map.offset + (ptr - map.va));
  return CUDA_SUCCESS;
}

bool process_alive(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Records the binding once the team is complete. Takes ownership of member.fd.
CUresult bind_locked(Object &object, int device, size_t mc_offset, const Member &member, size_t size) {
  team::Record &r = *object.record;
  team::Lock lock(&r);
  reap(r);
  if ((r.device_mask & (1u << device)) == 0) return CUDA_ERROR_INVALID_DEVICE;  // not in the team
  team::Binding *free_slot = nullptr;
  for (team::Binding &b : r.bindings) {
    if (b.serial != 0 && !process_alive(b.pid)) b = team::Binding{};  // its process exited
    if (b.serial == 0) {
      if (free_slot == nullptr) free_slot = &b;
      continue;
    }
    if (b.device == device && b.mc_offset < mc_offset + size && mc_offset < b.mc_offset + b.size)
      return CUDA_ERROR_INVALID_VALUE;  // overlaps a binding of this device
  }
  if (free_slot == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  team::Binding b;
  b.device = device;
  b.pid = getpid();
  b.mc_offset = mc_offset;
  b.size = size;
  b.member_id = member.id;
  b.member_offset = member.offset;
  b.member_fd = member.fd;
  b.serial = r.next_serial++;
  *free_slot = b;
  if (member.fd >= 0) keep_binding_fd(r.id, b.serial, member.fd);
  team::changed(&r);
  return CUDA_SUCCESS;
}

// Every bind ABI ends here. `device` < 0: the member's own device (BindMem and BindAddr v1
// name no device). Closes member.fd unless the binding keeps it.
CUresult bind(CUmemGenericAllocationHandle mc, int device, size_t mc_offset, const Member &member, size_t size,
              unsigned long long flags) {
  auto fail = [&](CUresult r) {
    if (member.fd >= 0) close(member.fd);
    return r;
  };
  if (flags != 0 || size == 0 || !aligned(mc_offset) || !aligned(size) || !aligned(member.offset))
    return fail(CUDA_ERROR_INVALID_VALUE);
  std::shared_ptr<Object> object = find_live(mc);
  if (object == nullptr) return fail(CUDA_ERROR_INVALID_VALUE);
  const team::Record &r = *object->record;
  if (mc_offset > r.capacity || size > r.capacity - mc_offset) return fail(CUDA_ERROR_INVALID_VALUE);
  // "Externally shareable as well as imported multicast objects can be bound only to
  // externally shareable memory."
  if (r.handle_types != 0 && !member.shareable) return fail(CUDA_ERROR_INVALID_VALUE);
  if (member.device < 0) return fail(CUDA_ERROR_INVALID_VALUE);  // host memory joins no device team
  if (device < 0) device = member.device;
  if (!devices::valid(device) || member.device != device) return fail(CUDA_ERROR_INVALID_DEVICE);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config().multicast_bind_timeout_ms);
  if (!team::wait_complete(object->record, deadline)) return fail(CUDA_ERROR_TIMEOUT);
  if (find(mc) != object) return fail(CUDA_ERROR_INVALID_VALUE);  // released while waiting
  CUresult result = bind_locked(*object, device, mc_offset, member, size);
  return result == CUDA_SUCCESS ? result : fail(result);
}

}  // namespace
}  // namespace simcuda::multicast

namespace mc = simcuda::multicast;

extern "C" {

CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastCreate");
  // Rejected arguments leave *mcHandle untouched, as the real driver does (the CUDA
  // documentation says nothing of a failed call's output).
  if (mcHandle == nullptr || prop == nullptr || prop->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->numDevices == 0 || prop->numDevices > static_cast<unsigned>(simcuda::devices::count()))
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->size == 0 || !mc::aligned(prop->size)) return CUDA_ERROR_INVALID_VALUE;
  if ((prop->handleTypes & ~static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0)
    return CUDA_ERROR_NOT_SUPPORTED;
  size_t round = simcuda::config().multicast_round_bytes;
  size_t capacity = round == 0 ? prop->size : (prop->size + round - 1) / round * round;
  simcuda::multicast::team::Record *record = nullptr;
  int fd = mc::team::create(simcuda::vmm::backing::new_id(), *prop, capacity, &record);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  bool attached = false;
  CUresult r = simcuda::vmm::adopt_multicast(mcHandle, record->id, capacity, prop->handleTypes,
                                             [&](CUmemGenericAllocationHandle h) {
                                               mc::add(h, fd, record);
                                               attached = true;
                                             });
  if (!attached) {
    mc::team::unmap(record);
    close(fd);
  }
  return r;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastAddDevice");
  std::shared_ptr<mc::Object> object = mc::find_live(mcHandle);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::team::Record &r = *object->record;
  mc::team::Lock lock(&r);
  if ((r.device_mask & (1u << dev)) != 0) return CUDA_ERROR_INVALID_VALUE;  // each device once
  if (mc::team::devices_added(r) >= r.num_devices) return CUDA_ERROR_INVALID_VALUE;  // team full
  r.device_mask |= 1u << dev;
  mc::team::changed(&r);
  return CUDA_SUCCESS;
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle,
                            size_t memOffset, size_t size, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindMem");
  mc::Member member;
  if (CUresult r = mc::member_of_handle(memHandle, memOffset, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, -1, mcOffset, member, size, flags);
}

CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                               CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                               unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindMem");
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::Member member;
  if (CUresult r = mc::member_of_handle(memHandle, memOffset, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, dev, mcOffset, member, size, flags);
}

// v1 names no device: the binding is for the calling thread's current context's device
// (CUDA_ERROR_INVALID_CONTEXT without one), which must be where the memory lives.
CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size,
                             unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindAddr");
  int device = 0;
  if (CUresult r = simcuda::contexts::current_device(&device); r != CUDA_SUCCESS) return r;
  mc::Member member;
  if (CUresult r = mc::member_of_address(memptr, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, device, mcOffset, member, size, flags);
}

CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUdeviceptr memptr,
                                size_t size, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindAddr");
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::Member member;
  if (CUresult r = mc::member_of_address(memptr, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, dev, mcOffset, member, size, flags);
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastUnbind");
  std::shared_ptr<mc::Object> object = mc::find_live(mcHandle);
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::team::Record &r = *object->record;
  if (size == 0 || !mc::aligned(mcOffset) || !mc::aligned(size) || mcOffset > r.capacity || size > r.capacity - mcOffset)
    return CUDA_ERROR_INVALID_VALUE;
  mc::team::Lock lock(&r);
  for (mc::team::Binding &b : r.bindings) {
    if (b.serial != 0 && b.device == dev && b.mc_offset == mcOffset && b.size == size) {
      if (b.pid == getpid()) mc::drop_binding_fd(r.id, b.serial);  // else its process reaps it
      b = mc::team::Binding{};
      mc::team::changed(&r);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;  // no binding with exactly this device, offset and size
}

CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
                                   CUmulticastGranularity_flags option) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastGetGranularity");
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (option) {
    case CU_MULTICAST_GRANULARITY_MINIMUM:
      *granularity = simcuda::kGranularity;
      return CUDA_SUCCESS;
    case CU_MULTICAST_GRANULARITY_RECOMMENDED:
      *granularity = mc::kRecommendedGranularity;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // extern "C"
