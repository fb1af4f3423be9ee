// Virtual memory management state and operations (vmm.h; CUDA Driver API, "Virtual Memory
// Management"). Bad arguments and unknown handles give CUDA_ERROR_INVALID_VALUE, the result the
// CUDA documentation lists for these entry points; bad device ordinals CUDA_ERROR_INVALID_DEVICE.
#include "vmm.h"

#include "devices.h"
#include "ledger.h"
#include "multicast.h"
#include "vmm_backing.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace simcuda::vmm {

State &state() {
  static State *s = new State;  // never destroyed: the service thread may run during exit
  return *s;
}

int device_of(const Allocation &a) {
  return a.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? a.prop.location.id : -1;
}

int physical_device_of(const Allocation &a) {
  if (a.unseen_gpu >= 0) return a.unseen_gpu;
  const int ordinal = device_of(a);
  return ordinal >= 0 ? devices::physical(ordinal) : -1;
}

namespace {

bool aligned(uint64_t value) { return value % kGranularity == 0; }

// Handles look like heap addresses (top 16 bits zero), so they never carry a tag a layer above
// the driver might use for handles of its own.
CUmemGenericAllocationHandle new_handle(State &s) { return 0x00007c0000000000ull + (s.next_handle++ << 4); }

Allocation *find_allocation(State &s, CUmemGenericAllocationHandle handle) {
  auto it = s.allocations.find(handle);
  if (it == s.allocations.end() || it->second->handle_refs == 0) return nullptr;
  return it->second.get();
}

const Reservation *reservation_at(State &s, CUdeviceptr va) {
  auto it = s.reservations.upper_bound(va);
  if (it == s.reservations.begin()) return nullptr;
  --it;
  return va < it->second.va + it->second.size ? &it->second : nullptr;
}

// The mappings that exactly tile [va, va+size); empty when the range is not wholly covered by
// whole mappings.
std::vector<Mapping *> tiling(State &s, CUdeviceptr va, size_t size) {
  std::vector<Mapping *> tiles;
  CUdeviceptr at = va;
  while (at < va + size) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end() || at + it->second.size > va + size) return {};
    tiles.push_back(&it->second);
    at += it->second.size;
  }
  return tiles;
}

void free_if_unused(State &s, Allocation *a) {
  if (a->handle_refs > 0 || a->mapping_count > 0) return;
  backing::discard(*a);
  if (!a->multicast) ledger::remove(a->id);
  if (a->multicast) multicast::forget(a->handle);
  s.allocations.erase(a->handle);
}

CUresult check_location(const CUmemLocation &loc) {
  switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return devices::valid(loc.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // one host NUMA node, id 0
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

constexpr unsigned kSupportedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

CUresult check_prop(const CUmemAllocationProp *prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  return check_location(prop->location);
}

// cuMemCreate's work, with the memfd kept when `keep_fd`.
CUresult create_allocation(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                           unsigned long long flags, bool keep_fd);

}  // namespace

Allocation *find_by_id(State &s, uint64_t id) {
  for (auto &[handle, a] : s.allocations)
    if (a->id == id) return a.get();
  return nullptr;
}

Mapping *mapping_at(State &s, CUdeviceptr va) {
  auto it = s.mappings.upper_bound(va);
  if (it == s.mappings.begin()) return nullptr;
  --it;
  return va < it->second.va + it->second.size ? &it->second : nullptr;
}

CUresult granularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                unsigned long long flags) {
  const bool keep_fd = prop != nullptr && (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  return create_allocation(handle, size, prop, flags, keep_fd);
}

namespace {

CUresult create_allocation(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                           unsigned long long flags, bool keep_fd) {
  if (handle == nullptr || flags != 0 || size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_prop(prop); r != CUDA_SUCCESS) return r;
  if ((prop->requestedHandleTypes & ~kSupportedHandleTypes) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  auto a = std::make_unique<Allocation>();
  a->id = backing::new_id();
  a->prop = *prop;
  a->size = size;
  int device = physical_device_of(*a);
  if (device >= 0 && ledger::bytes_in_use(device) + size > config().device_memory_bytes)
    return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult r = backing::create(*a, keep_fd); r != CUDA_SUCCESS) return r;
  a->handle_refs = 1;
  State &s = state();
  std::lock_guard lock(s.mutex);
  a->handle = new_handle(s);
  *handle = a->handle;
  ledger::add(a->id, device, size);
  s.allocations.emplace(a->handle, std::move(a));
  return CUDA_SUCCESS;
}

}  // namespace

CUresult adopt_multicast(CUmemGenericAllocationHandle *handle, uint64_t id, size_t capacity,
                         unsigned long long handle_types,
                         const std::function<void(CUmemGenericAllocationHandle)> &attach) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  if (Allocation *known = find_by_id(s, id)) {  // held here already (by handle or mapping)
    ++known->handle_refs;
    *handle = known->handle;
    return CUDA_SUCCESS;
  }
  auto a = std::make_unique<Allocation>();
  a->id = id;
  a->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  a->prop.location = {CU_MEM_LOCATION_TYPE_INVALID, 0};
  a->prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  a->size = capacity;
  a->multicast = true;
  if (CUresult r = backing::create(*a, false); r != CUDA_SUCCESS) return r;
  a->handle_refs = 1;
  a->handle = new_handle(s);
  *handle = a->handle;
  attach(a->handle);
  s.allocations.emplace(a->handle, std::move(a));
  return CUDA_SUCCESS;
}

CUresult release(CUmemGenericAllocationHandle handle) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  Allocation *a = find_allocation(s, handle);
  // A released or unknown handle: CUDA_ERROR_INVALID_VALUE, as the shim must pass on (the
  // real driver answers 1; `gpu_driver_facts odd-args` records it).
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  --a->handle_refs;
  free_if_unused(s, a);  // memory stays while mapped (CUDA: freed when handles and mappings are gone)
  return CUDA_SUCCESS;
}

bool handle_live(CUmemGenericAllocationHandle handle) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  return find_allocation(s, handle) != nullptr;
}

CUresult reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
  if (ptr == nullptr || size == 0 || !aligned(size) || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment < kGranularity) alignment = kGranularity;
  CUdeviceptr va = backing::reserve_range(size, alignment, addr);
  if (va == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State &s = state();
  std::lock_guard lock(s.mutex);
  s.reservations[va] = Reservation{va, size};
  *ptr = va;
  return CUDA_SUCCESS;
}

CUresult address_free(CUdeviceptr ptr, size_t size) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  munmap(reinterpret_cast<void *>(ptr), size);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (va == 0 || size == 0 || flags != 0 || !aligned(va) || !aligned(size) || !aligned(offset))
    return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  Allocation *a = find_allocation(s, handle);
  if (a == nullptr || offset > a->size || size > a->size - offset) return CUDA_ERROR_INVALID_VALUE;
  const Reservation *r = reservation_at(s, va);
  if (r == nullptr || va + size > r->va + r->size) return CUDA_ERROR_INVALID_VALUE;  // not reserved
  auto next = s.mappings.lower_bound(va);
  if ((next != s.mappings.end() && next->first < va + size) || mapping_at(s, va) != nullptr)
    return CUDA_ERROR_INVALID_VALUE;  // overlaps a mapping
  if (!backing::place(*a, offset, va, size, PROT_NONE)) return CUDA_ERROR_OUT_OF_MEMORY;
  s.mappings[va] = Mapping{va, size, offset, handle, {}};
  ++a->mapping_count;
  return CUDA_SUCCESS;
}

CUresult unmap(CUdeviceptr va, size_t size) {
  if (va == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  std::vector<Mapping *> tiles = tiling(s, va, size);
  if (tiles.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (Mapping *m : tiles) {
    backing::make_reserved(m->va, m->size);
    Allocation *a = s.allocations.at(m->handle).get();
    --a->mapping_count;
    s.mappings.erase(m->va);
    free_if_unused(s, a);
  }
  return CUDA_SUCCESS;
}

CUresult set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count) {
  // Every descriptor is checked before any is applied: a rejected call changes nothing
  // (DRIVER-FACTS F12b: a rejected {DEVICE 0 RW, DEVICE 99 READ} applies nothing, and an
  // unknown device is CUDA_ERROR_INVALID_VALUE here, not INVALID_DEVICE).
  if (va == 0 || size == 0 || desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc &d = desc[i];
    if (d.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return CUDA_ERROR_INVALID_VALUE;
    if (d.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (!devices::valid(d.location.id)) return CUDA_ERROR_INVALID_VALUE;
    } else if (d.location.type != CU_MEM_LOCATION_TYPE_HOST && d.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  State &s = state();
  std::lock_guard lock(s.mutex);
  std::vector<Mapping *> tiles = tiling(s, va, size);
  if (tiles.empty()) return CUDA_ERROR_INVALID_VALUE;
  // Host access to memory that lives on a device is not supported: READ or RW for HOST or
  // HOST_NUMA fails 801 and nothing is applied; NONE is accepted (DRIVER-FACTS F12b).
  for (Mapping *m : tiles) {
    auto a = s.allocations.find(m->handle);
    const bool on_device = a != s.allocations.end() && a->second->prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    for (size_t i = 0; on_device && i < count; ++i) {
      if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  for (Mapping *m : tiles) {
    for (size_t i = 0; i < count; ++i) {
      const CUmemAccessDesc &d = desc[i];
      size_t slot = d.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? static_cast<size_t>(d.location.id)
                                                                   : size_t{kHostAccessSlot};
      m->access[slot] = static_cast<unsigned char>(d.flags);
    }
    backing::protect(*m);
  }
  return CUDA_SUCCESS;
}

CUresult get_access(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr va) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t slot = kHostAccessSlot;
  if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (!devices::valid(location->id)) return CUDA_ERROR_INVALID_DEVICE;
    slot = static_cast<size_t>(location->id);
  } else if (location->type != CU_MEM_LOCATION_TYPE_HOST && location->type != CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State &s = state();
  std::lock_guard lock(s.mutex);
  Mapping *m = mapping_at(s, va);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = m->access[slot];
  // One host access per mapping, set by HOST and HOST_NUMA descriptors alike; asked as HOST
  // while it is NONE, the driver answers device 0's access (DRIVER-FACTS F12, measured on a
  // HOST_NUMA allocation).
  if (location->type == CU_MEM_LOCATION_TYPE_HOST && *flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
    *flags = m->access[0];
  }
  return CUDA_SUCCESS;
}

CUresult export_handle(void *shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags) {
  // flags "must be 0" (CUDA Driver API); a type the allocation did not request, FABRIC, NONE
  // or WIN32 included, is CUDA_ERROR_INVALID_VALUE (the real driver answers 1), and
  // the output is left as it was.
  if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  Allocation *a = find_allocation(s, handle);
  if (a == nullptr || a->multicast) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || (a->prop.requestedHandleTypes & type) == 0)
    return CUDA_ERROR_INVALID_VALUE;  // only the handle types requested at creation can be exported
  if (a->native_cycled) return CUDA_ERROR_INVALID_VALUE;  // DRIVER-FACTS F3, F4
  if (a->fd < 0) return CUDA_ERROR_NOT_SUPPORTED;  // an importer keeps no descriptor to re-export
  int fd = backing::duplicate_fd(*a);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int *>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle, CUmemAllocationHandleType type) {
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  Allocation described;
  if (!backing::describe(fd, described)) return CUDA_ERROR_INVALID_VALUE;  // not a simcuda allocation
  State &s = state();
  std::lock_guard lock(s.mutex);
  return adopt_imported(s, std::move(described), fd, handle);
}

CUresult adopt_imported(State &s, Allocation described, int fd, CUmemGenericAllocationHandle *handle) {
  if (Allocation *known = find_by_id(s, described.id)) {  // imported (or created) here before
    ++known->handle_refs;
    *handle = known->handle;
    return CUDA_SUCCESS;
  }
  auto a = std::make_unique<Allocation>(std::move(described));
  if (!backing::attach(*a, fd)) return CUDA_ERROR_OUT_OF_MEMORY;
  a->imported = true;
  a->handle_refs = 1;
  a->handle = new_handle(s);
  *handle = a->handle;
  ledger::add(a->id, physical_device_of(*a), a->size);
  s.allocations.emplace(a->handle, std::move(a));
  return CUDA_SUCCESS;
}

CUresult properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  Allocation *a = find_allocation(s, handle);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = a->prop;
  return CUDA_SUCCESS;
}

CUresult retain(CUmemGenericAllocationHandle *handle, void *addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  Mapping *m = mapping_at(s, reinterpret_cast<CUdeviceptr>(addr));
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;  // any address inside a mapping will do
  Allocation *a = s.allocations.at(m->handle).get();
  ++a->handle_refs;
  *handle = a->handle;
  return CUDA_SUCCESS;
}

CUresult address_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  Mapping *m = mapping_at(s, ptr);
  if (m == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = m->va;
  if (size != nullptr) *size = m->size;
  return CUDA_SUCCESS;
}

CUresult device_malloc(CUdeviceptr *ptr, size_t size, int device) {
  if (ptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (size + kGranularity - 1) / kGranularity * kGranularity;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = create_allocation(&handle, rounded, &prop, 0, true); r != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  if (CUresult r = reserve(&va, rounded, 0, 0, 0); r != CUDA_SUCCESS) {
    release(handle);
    return r;
  }
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (CUresult r = map(va, rounded, 0, handle, 0); r != CUDA_SUCCESS) {
    address_free(va, rounded);
    release(handle);
    return r;
  }
  set_access(va, rounded, &access, 1);
  release(handle);  // the mapping keeps it alive; cuMemFree unmaps it
  {
    State &s = state();
    std::lock_guard lock(s.mutex);
    s.allocations.at(handle)->device_malloc = true;
  }
  *ptr = va;
  return CUDA_SUCCESS;
}

CUresult device_free(CUdeviceptr ptr) {
  size_t size = 0;
  {
    State &s = state();
    std::lock_guard lock(s.mutex);
    auto m = s.mappings.find(ptr);
    if (m == s.mappings.end() || !s.allocations.at(m->second.handle)->device_malloc) return CUDA_ERROR_INVALID_VALUE;
    size = m->second.size;
  }
  if (CUresult r = unmap(ptr, size); r != CUDA_SUCCESS) return r;
  return address_free(ptr, size);
}

CUresult locate(CUdeviceptr ptr, size_t size, bool write, bool *device_memory) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  *device_memory = reservation_at(s, ptr) != nullptr;
  if (!*device_memory) return CUDA_SUCCESS;
  CUdeviceptr at = ptr;
  while (at < ptr + size) {  // every byte mapped, with the access the copy needs
    Mapping *m = mapping_at(s, at);
    if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int prot = backing::protection(m->access);
    if ((prot & (write ? PROT_WRITE : PROT_READ)) == 0) return CUDA_ERROR_INVALID_VALUE;
    at = m->va + m->size;
  }
  return CUDA_SUCCESS;
}

}  // namespace simcuda::vmm
