// Multicast objects (multicast.h).
#include "multicast.h"

#include "api_call.h"
#include "config.h"
#include "contexts.h"
#include "devices.h"
#include "vmm.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace simcuda::multicast {
namespace {

// How long a bind waits for the rest of the team before giving up (the real driver waits forever).
constexpr auto kBindWait = std::chrono::seconds(60);

struct Binding {
  int device;
  size_t mc_offset;
  size_t size;
  CUmemGenericAllocationHandle memory;  // the bound allocation
  size_t memory_offset;
};

struct Team {
  unsigned team_size = 0;  // prop.numDevices
  size_t size = 0;         // bytes per device
  std::set<int> devices;
  std::vector<Binding> bindings;
};

struct Teams {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<CUmemGenericAllocationHandle, Team> teams;  // by multicast handle
};

Teams &teams() {
  static Teams *t = new Teams;  // never destroyed
  return *t;
}

bool aligned(size_t v) { return v % kGranularity == 0; }

// What a bind names: an allocation (and offset into it) and, when known, the device.
struct Member {
  CUmemGenericAllocationHandle memory = 0;
  size_t offset = 0;
  int device = -1;
};

// Looks up the allocation behind `handle` (a unicast allocation of this process).
CUresult member_of_handle(CUmemGenericAllocationHandle handle, size_t offset, size_t size, Member *m) {
  vmm::State &s = vmm::state();
  std::lock_guard lock(s.mutex);
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end() || it->second->handle_refs == 0 || it->second->multicast) return CUDA_ERROR_INVALID_VALUE;
  const vmm::Allocation &a = *it->second;
  if (offset > a.size || size > a.size - offset) return CUDA_ERROR_INVALID_VALUE;
  *m = Member{handle, offset, vmm::device_of(a)};
  return CUDA_SUCCESS;
}

// Looks up the allocation mapped at [ptr, ptr+size) (one mapping of a unicast allocation).
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
  *m = Member{map.handle, map.offset + (ptr - map.va), vmm::device_of(a)};
  return CUDA_SUCCESS;
}

CUresult bind(CUmemGenericAllocationHandle mc, int device, size_t mc_offset, const Member &member, size_t size,
              unsigned long long flags) {
  if (flags != 0 || size == 0 || !aligned(mc_offset) || !aligned(size) || !aligned(member.offset))
    return CUDA_ERROR_INVALID_VALUE;
  if (!devices::valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (member.device != device) return CUDA_ERROR_INVALID_DEVICE;  // memory must live on the bound device
  Teams &t = teams();
  std::unique_lock lock(t.mutex);
  auto it = t.teams.find(mc);
  if (it == t.teams.end()) return CUDA_ERROR_INVALID_VALUE;
  Team &team = it->second;
  if (mc_offset > team.size || size > team.size - mc_offset) return CUDA_ERROR_INVALID_VALUE;
  if (team.devices.count(device) == 0) return CUDA_ERROR_INVALID_DEVICE;
  bool complete = t.changed.wait_for(lock, kBindWait, [&] {
    auto found = t.teams.find(mc);
    return found == t.teams.end() || found->second.devices.size() == found->second.team_size;
  });
  it = t.teams.find(mc);
  if (it == t.teams.end()) return CUDA_ERROR_INVALID_VALUE;  // released while waiting
  if (!complete) return CUDA_ERROR_TIMEOUT;
  for (const Binding &b : it->second.bindings)
    if (b.device == device && b.mc_offset < mc_offset + size && mc_offset < b.mc_offset + b.size)
      return CUDA_ERROR_INVALID_VALUE;  // overlaps an existing binding of this device
  it->second.bindings.push_back(Binding{device, mc_offset, size, member.memory, member.offset});
  return CUDA_SUCCESS;
}

}  // namespace

void forget(CUmemGenericAllocationHandle handle) {
  Teams &t = teams();
  std::lock_guard lock(t.mutex);
  t.teams.erase(handle);
  t.changed.notify_all();
}

size_t count() {
  Teams &t = teams();
  std::lock_guard lock(t.mutex);
  return t.teams.size();
}

}  // namespace simcuda::multicast

namespace mc = simcuda::multicast;

extern "C" {

CUresult cuMulticastCreate(CUmemGenericAllocationHandle *mcHandle, const CUmulticastObjectProp *prop) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastCreate");
  if (mcHandle == nullptr || prop == nullptr || prop->flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->numDevices == 0 || prop->numDevices > static_cast<unsigned>(simcuda::devices::count()))
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->size == 0 || !mc::aligned(prop->size)) return CUDA_ERROR_INVALID_VALUE;
  if ((prop->handleTypes & ~static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0)
    return CUDA_ERROR_NOT_SUPPORTED;
  CUmemAllocationProp memory{};
  memory.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  memory.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(prop->handleTypes);
  memory.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = simcuda::vmm::create(&handle, prop->size, &memory, 0, true); r != CUDA_SUCCESS) return r;
  mc::Teams &t = mc::teams();
  std::lock_guard lock(t.mutex);
  mc::Team &team = t.teams[handle];
  team.team_size = prop->numDevices;
  team.size = prop->size;
  *mcHandle = handle;
  return CUDA_SUCCESS;
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastAddDevice");
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::Teams &t = mc::teams();
  std::lock_guard lock(t.mutex);
  auto it = t.teams.find(mcHandle);
  if (it == t.teams.end()) return CUDA_ERROR_INVALID_VALUE;
  mc::Team &team = it->second;
  if (team.devices.count(dev) != 0 || team.devices.size() >= team.team_size) return CUDA_ERROR_INVALID_VALUE;
  team.devices.insert(dev);
  t.changed.notify_all();
  return CUDA_SUCCESS;
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUmemGenericAllocationHandle memHandle,
                            size_t memOffset, size_t size, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindMem");
  mc::Member member;
  if (CUresult r = mc::member_of_handle(memHandle, memOffset, size, &member); r != CUDA_SUCCESS) return r;
  if (member.device < 0) return CUDA_ERROR_INVALID_VALUE;  // host memory cannot join a device team
  return mc::bind(mcHandle, member.device, mcOffset, member, size, flags);
}

CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                               CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                               unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindMem");
  mc::Member member;
  if (CUresult r = mc::member_of_handle(memHandle, memOffset, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, dev, mcOffset, member, size, flags);
}

CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr, size_t size,
                             unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindAddr");
  mc::Member member;
  if (CUresult r = mc::member_of_address(memptr, size, &member); r != CUDA_SUCCESS) return r;
  if (member.device < 0) return CUDA_ERROR_INVALID_VALUE;
  return mc::bind(mcHandle, member.device, mcOffset, member, size, flags);
}

CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, CUdeviceptr memptr,
                                size_t size, unsigned long long flags) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastBindAddr");
  mc::Member member;
  if (CUresult r = mc::member_of_address(memptr, size, &member); r != CUDA_SUCCESS) return r;
  return mc::bind(mcHandle, dev, mcOffset, member, size, flags);
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastUnbind");
  if (!simcuda::devices::valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  mc::Teams &t = mc::teams();
  std::lock_guard lock(t.mutex);
  auto it = t.teams.find(mcHandle);
  if (it == t.teams.end()) return CUDA_ERROR_INVALID_VALUE;
  auto &bindings = it->second.bindings;
  for (auto b = bindings.begin(); b != bindings.end(); ++b) {
    if (b->device == dev && b->mc_offset == mcOffset && b->size == size) {
      bindings.erase(b);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;  // no binding with exactly this device, offset and size
}

CUresult cuMulticastGetGranularity(size_t *granularity, const CUmulticastObjectProp *prop,
                                   CUmulticastGranularity_flags option) {
  SIMCUDA_CALL_INITIALIZED("cuMulticastGetGranularity");
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MULTICAST_GRANULARITY_MINIMUM && option != CU_MULTICAST_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = simcuda::kGranularity;
  return CUDA_SUCCESS;
}

}  // extern "C"
