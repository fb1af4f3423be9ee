// Virtual memory management state of this process: allocations (physical memory, memfd
// backed), VA reservations, mappings of allocations into reservations, and per-device access.
//
// Every allocation is kept as a private MAP_SHARED "backing window" over its memfd; a mapping
// at a VA is a duplicate of part of that window made with mremap(old_size = 0), so the VA and
// the window share pages and an importer never keeps the descriptor it imported from. Unmapped
// parts of reservations are PROT_NONE anonymous memory. A mapping's protection follows its
// access descriptors (read-write if any device may write, read-only if any may read, else none).
#pragma once

#include "config.h"
#include "cuda_api.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace simcuda::vmm {

/// Access flags per device, plus one slot for the host (CU_MEM_LOCATION_TYPE_HOST[_NUMA]).
inline constexpr int kHostAccessSlot = kMaxDevices;
using AccessFlags = std::array<unsigned char, kMaxDevices + 1>;

struct Allocation {
  CUmemGenericAllocationHandle handle = 0;
  uint64_t id = 0;  // the same in every process that holds it (travels in the memfd's name)
  CUmemAllocationProp prop{};
  size_t size = 0;  // bytes, a granularity multiple
  int fd = -1;      // the memfd, kept by the creator only when POSIX export was requested
  unsigned char *backing = nullptr;  // nullptr while released by a native checkpoint
  bool imported = false;             // came from cuMemImportFromShareableHandle
  // Imported DEVICE memory on a GPU this process does not see (CUDA_VISIBLE_DEVICES): that
  // GPU (the memfd's name says), which prop.location.id then names by its index, not by an
  // ordinal of this process; -1 otherwise (the ordinal names it, and follows a device map).
  int unseen_gpu = -1;
  bool device_malloc = false;        // made by cuMemAlloc (freed by cuMemFree)
  bool multicast = false;            // stands for a multicast object (multicast.h)
  bool ipc_opened = false;           // mapped here by cuIpcOpenMemHandle (DRIVER-FACTS F11)
  bool native_cycled = false;        // went through a native checkpoint: export refused (F3)
  unsigned handle_refs = 0;          // create/import/retain references not yet released
  unsigned mapping_count = 0;        // mappings of it in this process
  std::vector<unsigned char> saved;  // contents while checkpointed
};

struct Mapping {
  CUdeviceptr va = 0;
  size_t size = 0;
  size_t offset = 0;  // into the allocation
  CUmemGenericAllocationHandle handle = 0;
  AccessFlags access{};
};

/// One handle opened here with cuIpcOpenMemHandle: where it is mapped and how many opens
/// are not closed yet (CUDA: the same handle opened again returns the same pointer).
struct IpcOpen {
  CUdeviceptr va = 0;
  size_t size = 0;
  unsigned refs = 0;
};

struct Reservation {
  CUdeviceptr va = 0;
  size_t size = 0;
};

/// All of it, guarded by `mutex`.
struct State {
  std::mutex mutex;
  std::map<CUmemGenericAllocationHandle, std::unique_ptr<Allocation>> allocations;
  std::map<CUdeviceptr, Mapping> mappings;          // by start VA
  std::map<CUdeviceptr, Reservation> reservations;  // by start VA
  std::map<uint64_t, IpcOpen> ipc_opens;             // by allocation id
  uint64_t next_handle = 1;
};

State &state();

// ---- Operations behind the entry points (each takes the state mutex) ----
/// cuMemCreate: INVALID_VALUE for bad arguments or a size that is not a granularity
/// multiple, INVALID_DEVICE for a bad device ordinal, NOT_SUPPORTED for FABRIC/WIN32 handle
/// types, OUT_OF_MEMORY when the device (cuMemGetInfo across processes) is full.
CUresult create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                unsigned long long flags);
/// The allocation that stands for multicast object `id` in this process (multicast.h): when
/// the process already holds it, one more handle reference on it; otherwise a new allocation
/// (multicast set, `capacity` bytes of private scratch memory for multicast VAs, properties
/// {PINNED, no location, handle_types}: CUDA does not document what
/// cuMemGetAllocationPropertiesFromHandle shows for a multicast object) for which `attach` runs
/// with the state mutex held. CUDA_ERROR_OUT_OF_MEMORY when the host cannot provide the scratch.
CUresult adopt_multicast(CUmemGenericAllocationHandle *handle, uint64_t id, size_t capacity,
                         unsigned long long handle_types,
                         const std::function<void(CUmemGenericAllocationHandle)> &attach);
CUresult release(CUmemGenericAllocationHandle handle);
/// True while `handle` names an allocation of this process with a handle reference left (a
/// handle whose allocation lives on only through mappings is no longer valid in API calls).
bool handle_live(CUmemGenericAllocationHandle handle);
CUresult reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags);
CUresult address_free(CUdeviceptr ptr, size_t size);
CUresult map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult unmap(CUdeviceptr va, size_t size);
CUresult set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult get_access(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr va);
CUresult export_handle(void *shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags);
CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle, CUmemAllocationHandleType type);
CUresult properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
CUresult retain(CUmemGenericAllocationHandle *handle, void *addr);
CUresult address_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
CUresult granularity(size_t *granularity, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option);
/// cuMemAlloc: a private allocation on `device`, reserved, mapped and read-write there. It
/// keeps its memfd so that cuIpcGetMemHandle can name it (vmm_ipc.h).
CUresult device_malloc(CUdeviceptr *ptr, size_t size, int device);
/// cuMemFree: `ptr` must be what device_malloc returned.
CUresult device_free(CUdeviceptr ptr);

// ---- Lookups for the other parts of the VMM state (the state mutex held) ----
/// The mapping that contains `va`, or nullptr.
Mapping *mapping_at(State &s, CUdeviceptr va);
/// The allocation this process holds with id `id` (by handle or mapping), or nullptr.
Allocation *find_by_id(State &s, uint64_t id);
/// Takes `described` (from backing::describe of `fd`) into this process as an imported
/// allocation with one handle reference: the one it holds already when it has that id, else a
/// new one over `fd` (not kept). CUDA_ERROR_OUT_OF_MEMORY when it cannot be mapped.
CUresult adopt_imported(State &s, Allocation described, int fd, CUmemGenericAllocationHandle *handle);

/// For copies: the host-usable address of [ptr, ptr+size) if it is device memory of this
/// process (mapped and readable, or writable when `write`); `*device_memory` false and
/// CUDA_SUCCESS when ptr is not in any reservation (host memory). CUDA_ERROR_INVALID_VALUE when
/// it is in a reservation but not wholly mapped with the needed access.
CUresult locate(CUdeviceptr ptr, size_t size, bool write, bool *device_memory);

/// Device ordinal of an allocation's location in this process (-1 for host memory). It
/// survives a restore onto other GPUs (DRIVER-FACTS F7).
int device_of(const Allocation &a);
/// The physical GPU the allocation's memory is on now (-1 for host memory): what the
/// ledger, cuMemGetInfo and introspection account it to.
int physical_device_of(const Allocation &a);

}  // namespace simcuda::vmm
