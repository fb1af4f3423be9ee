// Legacy CUDA IPC over the creators' endpoints (legacy_ipc.h).
#include "shim/hooks/legacy_ipc.h"

#include <sys/random.h>
#include <unistd.h>

#include <cstring>

#include "common/ids.h"
#include "common/log.h"
#include "shim/hooks/hooks.h"
#include "shim/hooks/ticket_import.h"
#include "shim/driver/driver_api.h"
#include "shim/process.h"

namespace cusnap::shim {
namespace {

constexpr uint32_t kIpcMagic = 0x50495343;  // "CSIP"
constexpr uint16_t kIpcVersion = 1;

// A cusnap CUipcMemHandle: exactly the 64 bytes of CU_IPC_HANDLE_SIZE, little-endian.
struct IpcHandleLayout {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  int32_t creator_pid;
  uint32_t reserved1;
  uint64_t creator_start;
  uint64_t local_id;
  uint64_t size;  ///< bytes of the allocation (what an opener maps)
  uint64_t reserved2;
  uint64_t secret[2];
};
static_assert(sizeof(IpcHandleLayout) == sizeof(CUipcMemHandle));

// The cusnap handle in `handle`, if it is one.
std::optional<IpcHandleLayout> ReadHandle(const CUipcMemHandle& handle) {
  IpcHandleLayout layout;
  std::memcpy(&layout, handle.reserved, sizeof layout);
  if (layout.magic != kIpcMagic || layout.version != kIpcVersion || layout.size == 0) return std::nullopt;
  return layout;
}

// Maps allocation `logical` (size bytes) at a VA reserved for it, read-write for `device` (or
// for every device with `all_devices`); the VA, or 0 and the driver's error in `*rc`.
CUdeviceptr MapOpened(uint64_t logical, size_t size, int device, bool all_devices, CUresult* rc) {
  auto reserve = driver().cuMemAddressReserve;
  auto address_free = driver().cuMemAddressFree;
  auto count = driver().cuDeviceGetCount;
  if (reserve == nullptr || address_free == nullptr || count == nullptr) {
    *rc = CUDA_ERROR_NOT_INITIALIZED;
    return 0;
  }
  CUdeviceptr va = 0;
  if ((*rc = reserve(&va, size, 0, 0, 0)) != CUDA_SUCCESS) return 0;
  if ((*rc = hook::cuMemMap(va, size, 0, logical, 0)) != CUDA_SUCCESS) {
    address_free(va, size);
    return 0;
  }
  int devices = 1;
  if (all_devices && count(&devices) != CUDA_SUCCESS) devices = 1;
  for (int d = all_devices ? 0 : device; d < (all_devices ? devices : device + 1); ++d) {
    const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if ((*rc = hook::cuMemSetAccess(va, size, &access, 1)) != CUDA_SUCCESS) {
      hook::cuMemUnmap(va, size);
      address_free(va, size);
      return 0;
    }
  }
  return va;
}

}  // namespace

CUresult ServeIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  std::optional<MallocEntry> entry = handle != nullptr ? malloc_table().Find(ptr) : std::nullopt;
  if (!entry) {
    auto real = driver().cuIpcGetMemHandle;
    return real != nullptr ? real(handle, ptr) : CUDA_ERROR_NOT_INITIALIZED;
  }
  PinScope pin(entry->logical);
  if (!pin) return CUDA_ERROR_INVALID_VALUE;
  if (!pin->has_real) return CUDA_ERROR_NOT_READY;
  // The handle carries the allocation's capability, as a ticket does (capabilities.h): the
  // creator serves a descriptor only to a request that proves it.
  const proto::Capability& secret = pin->capability;
  if (CUresult rc = CacheCreatorExport(*pin); rc != CUDA_SUCCESS) return rc;
  IpcHandleLayout layout{};
  layout.magic = kIpcMagic;
  layout.version = kIpcVersion;
  layout.creator_pid = pin->id.creator_pid;
  layout.creator_start = pin->id.creator_start;
  layout.local_id = pin->id.local_id;
  layout.size = entry->size;
  layout.secret[0] = secret.word[0];
  layout.secret[1] = secret.word[1];
  std::memcpy(handle->reserved, &layout, sizeof layout);
  return CUDA_SUCCESS;
}

CUresult ServeIpcOpenMemHandle(CUresult (*real)(CUdeviceptr*, CUipcMemHandle, unsigned int),
                               CUdeviceptr* ptr, const CUipcMemHandle& handle, unsigned flags) {
  std::optional<IpcHandleLayout> layout = ReadHandle(handle);
  if (!layout || ptr == nullptr) {
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    const CUresult rc = real(ptr, handle, flags);
    // Memory of a process outside cusnap: nothing can bring it back after a restore.
    if (rc == CUDA_SUCCESS) malloc_table().NoteUnsupported("cuIpcOpenMemHandle of a handle not made under cusnap");
    return rc;
  }
  if ((flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUdevice device = 0;
  auto get_device = driver().cuCtxGetDevice;
  if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  const proto::ObjectId id{layout->creator_pid, 0, layout->creator_start, layout->local_id};
  if (id.creator_pid == SelfIdentity().pid) return CUDA_ERROR_INVALID_CONTEXT;  // the driver's rule
  if (std::optional<CUdeviceptr> again = malloc_table().Reopen(id)) {
    *ptr = *again;
    return CUDA_SUCCESS;
  }
  const proto::Capability secret{{layout->secret[0], layout->secret[1]}};
  CUmemGenericAllocationHandle logical = 0;
  if (CUresult rc = ImportAllocation(id, secret, &logical); rc != CUDA_SUCCESS) return rc;
  CUresult rc = CUDA_SUCCESS;
  const CUdeviceptr va = MapOpened(logical, layout->size, device,
                                   (flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0, &rc);
  hook::cuMemRelease(logical);  // the mapping keeps the allocation until the last close
  if (va == 0) return rc == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_MAP_FAILED : rc;
  malloc_table().AddOpen(IpcOpenEntry{va, layout->size, id, 1});
  *ptr = va;
  return CUDA_SUCCESS;
}

CUresult ServeIpcCloseMemHandle(CUdeviceptr ptr) {
  std::optional<IpcOpenEntry> open = malloc_table().CloseOpen(ptr);
  if (!open) {
    auto real = driver().cuIpcCloseMemHandle;
    return real != nullptr ? real(ptr) : CUDA_ERROR_NOT_INITIALIZED;
  }
  if (open->refs > 0) return CUDA_SUCCESS;
  hook::cuMemUnmap(open->base, open->size);
  if (auto address_free = driver().cuMemAddressFree) address_free(open->base, open->size);
  return CUDA_SUCCESS;
}

}  // namespace cusnap::shim
