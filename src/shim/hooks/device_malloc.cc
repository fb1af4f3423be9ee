// cuMemAlloc served by shim-owned VMM allocations (device_malloc.h).
#include "shim/hooks/device_malloc.h"

#include <cstring>

#include "common/log.h"
#include "shim/hooks/hooks.h"
#include "shim/driver/driver_api.h"
#include "shim/process.h"

namespace cusnap::shim {
namespace {

// Unmaps, releases and frees what ServeMemAlloc made (any step may be absent: 0).
void Undo(CUdeviceptr va, size_t size, bool mapped, uint64_t logical) {
  if (mapped) hook::cuMemUnmap(va, size);
  if (logical != 0) hook::cuMemRelease(logical);
  if (va != 0) {
    if (auto address_free = driver().cuMemAddressFree) address_free(va, size);
  }
}

}  // namespace

CUresult ServeMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  auto real_alloc = driver().cuMemAlloc_v2;
  if (real_alloc == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice device = 0;
  auto get_device = driver().cuCtxGetDevice;
  if (dptr == nullptr || bytesize == 0 || get_device == nullptr || get_device(&device) != CUDA_SUCCESS) {
    return real_alloc(dptr, bytesize);  // the driver's answer to these
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t granularity = 0;
  auto get_granularity = driver().cuMemGetAllocationGranularity;
  if (get_granularity == nullptr ||
      get_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || granularity == 0) {
    return real_alloc(dptr, bytesize);  // no VMM on this device: native memory
  }
  if (bytesize > SIZE_MAX - granularity) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t size = (bytesize + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle logical = 0;
  if (CUresult rc = hook::cuMemCreate(&logical, size, &prop, 0); rc != CUDA_SUCCESS) return rc;
  CUdeviceptr va = 0;
  auto reserve = driver().cuMemAddressReserve;
  CUresult rc = reserve != nullptr ? reserve(&va, size, granularity, 0, 0) : CUDA_ERROR_NOT_INITIALIZED;
  if (rc != CUDA_SUCCESS) {
    Undo(0, size, false, logical);
    return rc;
  }
  if ((rc = hook::cuMemMap(va, size, 0, logical, 0)) != CUDA_SUCCESS) {
    Undo(va, size, false, logical);
    return rc;
  }
  const CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if ((rc = hook::cuMemSetAccess(va, size, &access, 1)) != CUDA_SUCCESS) {
    Undo(va, size, true, logical);
    return rc;
  }
  PinScope pin(logical);
  if (!pin) {  // cannot happen: the handle was just made
    Undo(va, size, true, logical);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  malloc_table().Add(MallocEntry{va, size, logical, pin->id, device});
  *dptr = va;
  return CUDA_SUCCESS;
}

CUresult ServeMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned element_size) {
  auto real_pitch = driver().cuMemAllocPitch_v2;
  auto real_free = driver().cuMemFree_v2;
  if (real_pitch == nullptr || real_free == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  // The driver checks the arguments and chooses the pitch; one row of it costs little.
  CUdeviceptr row = 0;
  size_t row_pitch = 0;
  const CUresult rc = real_pitch(&row, &row_pitch, width, 1, element_size);
  if (rc != CUDA_SUCCESS || dptr == nullptr || pitch == nullptr || height == 0) {
    if (rc == CUDA_SUCCESS) real_free(row);
    return real_pitch(dptr, pitch, width, height, element_size);  // the driver's answer
  }
  real_free(row);
  if (height > SIZE_MAX / row_pitch) return CUDA_ERROR_OUT_OF_MEMORY;
  if (CUresult served = ServeMemAlloc(dptr, row_pitch * height); served != CUDA_SUCCESS) return served;
  *pitch = row_pitch;
  return CUDA_SUCCESS;
}

CUresult ServeMemFree(CUdeviceptr dptr) {
  std::optional<MallocEntry> entry = dptr != 0 ? malloc_table().Find(dptr) : std::nullopt;
  if (!entry) {
    auto real_free = driver().cuMemFree_v2;
    return real_free != nullptr ? real_free(dptr) : CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dptr != entry->base) return CUDA_ERROR_INVALID_VALUE;  // what the driver says of an inner pointer
  malloc_table().Remove(entry->base);
  Undo(entry->base, entry->size, true, entry->logical);
  return CUDA_SUCCESS;
}

void PatchPointerAttribute(CUpointer_attribute attribute, void* data, CUdeviceptr ptr) {
  if (data == nullptr || !malloc_table().Serves(ptr)) return;
  if (attribute == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE) {
    // cuMemAlloc memory (an IPC open of it too, in the driver's terms) is legacy-IPC capable.
    const unsigned capable = malloc_table().Find(ptr).has_value() ? 1u : 0u;
    std::memcpy(data, &capable, sizeof capable);
  } else if (attribute == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES) {
    const unsigned long long none = CU_MEM_HANDLE_TYPE_NONE;
    std::memcpy(data, &none, sizeof none);
  }
}

}  // namespace cusnap::shim
