// Page-locked host memory: cuMemHostAlloc/cuMemAllocHost/cuMemFreeHost and
// cuMemHostRegister/Unregister/GetFlags. Nothing is actually pinned; the driver remembers the
// ranges and their flags (CUDA Driver API, "Memory Management"). Each needs a current context.
#include "api_call.h"
#include "contexts.h"

#include <sys/mman.h>

#include <map>
#include <mutex>

namespace simcuda {
namespace {

struct HostRange {
  size_t size = 0;
  unsigned flags = 0;
  bool allocated = false;  // by cuMemHostAlloc (else registered user memory)
};

struct HostTable {
  std::mutex mutex;
  std::map<uintptr_t, HostRange> ranges;  // by start address
};

HostTable &table() {
  static HostTable *t = new HostTable;  // never destroyed
  return *t;
}

// The range containing `p`, or end().
std::map<uintptr_t, HostRange>::iterator containing(HostTable &t, uintptr_t p) {
  auto it = t.ranges.upper_bound(p);
  if (it == t.ranges.begin()) return t.ranges.end();
  --it;
  return p < it->first + it->second.size ? it : t.ranges.end();
}

CUresult need_context() {
  int device = 0;
  return contexts::current_device(&device);
}

constexpr unsigned kHostAllocFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kHostRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                        CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

CUresult host_alloc(void **pp, size_t bytes, unsigned flags) {
  if (pp == nullptr || bytes == 0 || (flags & ~kHostAllocFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  HostTable &t = table();
  std::lock_guard lock(t.mutex);
  t.ranges[reinterpret_cast<uintptr_t>(p)] = HostRange{bytes, flags, true};
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda

using simcuda::table;

extern "C" {

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemHostAlloc");
  return simcuda::host_alloc(pp, bytesize, Flags);
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
  SIMCUDA_CALL_INITIALIZED("cuMemAllocHost");
  return simcuda::host_alloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void *p) {
  SIMCUDA_CALL_INITIALIZED("cuMemFreeHost");
  if (CUresult r = simcuda::need_context(); r != CUDA_SUCCESS) return r;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == t.ranges.end() || !it->second.allocated) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second.size);
  t.ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags) {
  SIMCUDA_CALL_INITIALIZED("cuMemHostRegister");
  if (p == nullptr || bytesize == 0 || (Flags & ~simcuda::kHostRegisterFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = simcuda::need_context(); r != CUDA_SUCCESS) return r;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  auto start = reinterpret_cast<uintptr_t>(p);
  auto next = t.ranges.lower_bound(start);
  if (simcuda::containing(t, start) != t.ranges.end() || (next != t.ranges.end() && next->first < start + bytesize))
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  t.ranges[start] = simcuda::HostRange{bytesize, Flags, false};
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void *p) {
  SIMCUDA_CALL_INITIALIZED("cuMemHostUnregister");
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = simcuda::need_context(); r != CUDA_SUCCESS) return r;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  auto it = t.ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == t.ranges.end() || it->second.allocated) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  t.ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p) {
  SIMCUDA_CALL_INITIALIZED("cuMemHostGetFlags");
  if (pFlags == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = simcuda::need_context(); r != CUDA_SUCCESS) return r;
  auto &t = table();
  std::lock_guard lock(t.mutex);
  auto it = simcuda::containing(t, reinterpret_cast<uintptr_t>(p));
  if (it == t.ranges.end()) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = it->second.flags;
  return CUDA_SUCCESS;
}

}  // extern "C"
