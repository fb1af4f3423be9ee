// Legacy CUDA IPC of device memory and pointer facts (vmm_ipc.h).
#include "vmm_ipc.h"

#include "devices.h"
#include "vmm_backing.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace simcuda::vmm {
namespace {

constexpr uint32_t kIpcMemMagic = 0x43504953;  // "SIPC"

// What a simcuda CUipcMemHandle holds (64 bytes: CU_IPC_HANDLE_SIZE).
struct IpcMemWire {
  uint32_t magic = kIpcMemMagic;
  int32_t pid = 0;
  int32_t fd = -1;  // the creator's memfd of the allocation
  uint32_t reserved = 0;
  uint64_t id = 0;
  uint64_t size = 0;
};
static_assert(sizeof(IpcMemWire) <= sizeof(CUipcMemHandle));

}  // namespace

CUresult ipc_get_mem_handle(CUipcMemHandle *handle, CUdeviceptr ptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State &s = state();
  std::lock_guard lock(s.mutex);
  Mapping *m = mapping_at(s, ptr);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Allocation &a = *s.allocations.at(m->handle);
  if (!a.device_malloc || a.fd < 0) return CUDA_ERROR_INVALID_VALUE;
  IpcMemWire wire;
  wire.pid = static_cast<int32_t>(::getpid());
  wire.fd = a.fd;
  wire.id = a.id;
  wire.size = a.size;
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &wire, sizeof wire);
  return CUDA_SUCCESS;
}

CUresult ipc_open_mem_handle(CUdeviceptr *ptr, const CUipcMemHandle &handle, unsigned flags, int device) {
  if (ptr == nullptr || (flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}) != 0) return CUDA_ERROR_INVALID_VALUE;
  IpcMemWire wire;
  std::memcpy(&wire, handle.reserved, sizeof wire);
  if (wire.magic != kIpcMemMagic || wire.size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (wire.pid == static_cast<int32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  State &s = state();
  {
    std::lock_guard lock(s.mutex);
    auto open = s.ipc_opens.find(wire.id);
    if (open != s.ipc_opens.end()) {  // opened here before: the same pointer, one more open
      ++open->second.refs;
      *ptr = open->second.va;
      return CUDA_SUCCESS;
    }
  }
  const std::string path = "/proc/" + std::to_string(wire.pid) + "/fd/" + std::to_string(wire.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;  // the creator or its allocation is gone
  Allocation described;
  CUmemGenericAllocationHandle mem = 0;
  CUresult r = CUDA_SUCCESS;
  if (!backing::describe(fd, described) || described.id != wire.id) {
    r = CUDA_ERROR_INVALID_HANDLE;  // that descriptor now names something else
  } else {
    std::lock_guard lock(s.mutex);
    described.device_malloc = false;
    r = adopt_imported(s, std::move(described), fd, &mem);
    if (r == CUDA_SUCCESS) s.allocations.at(mem)->ipc_opened = true;
  }
  ::close(fd);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  const size_t size = wire.size;
  r = reserve(&va, size, 0, 0, 0);
  if (r == CUDA_SUCCESS && (r = map(va, size, 0, mem, 0)) != CUDA_SUCCESS) address_free(va, size);
  // Read-write for the opener's device; with lazy peer access, for every device.
  const bool every_device = (flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0;
  if (r == CUDA_SUCCESS) {
    for (int d = every_device ? 0 : device; d < (every_device ? devices::count() : device + 1); ++d) {
      CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      set_access(va, size, &access, 1);
    }
  }
  release(mem);  // the mapping keeps it; cuIpcCloseMemHandle unmaps it
  if (r != CUDA_SUCCESS) return r == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_MAP_FAILED : r;
  std::lock_guard lock(s.mutex);
  s.ipc_opens[wire.id] = IpcOpen{va, size, 1};
  *ptr = va;
  return CUDA_SUCCESS;
}

CUresult ipc_close_mem_handle(CUdeviceptr ptr) {
  State &s = state();
  size_t size = 0;
  {
    std::lock_guard lock(s.mutex);
    auto open = s.ipc_opens.begin();
    while (open != s.ipc_opens.end() && open->second.va != ptr) ++open;
    if (open == s.ipc_opens.end()) return CUDA_ERROR_INVALID_VALUE;
    if (--open->second.refs > 0) return CUDA_SUCCESS;
    size = open->second.size;
    s.ipc_opens.erase(open);
  }
  if (CUresult r = unmap(ptr, size); r != CUDA_SUCCESS) return r;
  return address_free(ptr, size);
}

bool holds_ipc_opened(State &s) {
  for (auto &[handle, a] : s.allocations)
    if (a->ipc_opened) return true;
  return false;
}

CUresult pointer_facts(CUdeviceptr ptr, int device_for_access, PointerFacts *facts) {
  State &s = state();
  std::lock_guard lock(s.mutex);
  Mapping *m = mapping_at(s, ptr);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Allocation &a = *s.allocations.at(m->handle);
  facts->base = m->va;
  facts->size = m->size;
  facts->buffer_id = a.id;
  facts->device = device_of(a);
  facts->legacy_ipc_capable = a.device_malloc;
  facts->handle_types = a.prop.requestedHandleTypes;
  facts->access = device_for_access >= 0 ? m->access[static_cast<size_t>(device_for_access)] : 0;
  return CUDA_SUCCESS;
}

}  // namespace simcuda::vmm
