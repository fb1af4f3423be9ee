// Native checkpoint and restore of this process's device memory (vmm_checkpoint.h).
#include "vmm_checkpoint.h"

#include "ledger.h"
#include "vmm.h"
#include "vmm_backing.h"
#include "vmm_ipc.h"

#include <algorithm>

namespace simcuda::vmm {
namespace {

// Whether the process held an imported allocation when it was checkpointed (F5), and whether
// one of them was opened from a legacy IPC handle (F11).
bool held_imported_allocation = false;
bool held_ipc_opened = false;

}  // namespace

CUresult checkpoint_all() {
  State &s = state();
  std::lock_guard lock(s.mutex);
  held_imported_allocation = false;
  held_ipc_opened = holds_ipc_opened(s);
  for (auto &[handle, a] : s.allocations) {
    if (a->backing == nullptr) continue;
    held_imported_allocation = held_imported_allocation || a->imported;
    a->saved.assign(a->backing, a->backing + a->size);
    backing::discard(*a);
    ledger::remove(a->id);
  }
  for (auto &[va, m] : s.mappings) backing::make_reserved(m.va, m.size);
  return CUDA_SUCCESS;
}

CUresult restore_all() {
  if (held_ipc_opened) return CUDA_ERROR_INVALID_VALUE;  // F11, before F5: IPC memory is imported too
  if (held_imported_allocation) return CUDA_ERROR_NOT_SUPPORTED;
  State &s = state();
  std::lock_guard lock(s.mutex);
  for (auto &[handle, a] : s.allocations) {
    if (a->backing != nullptr) continue;
    if (CUresult r = backing::create(*a, false); r != CUDA_SUCCESS) return r;
    std::copy(a->saved.begin(), a->saved.end(), a->backing);
    a->saved.clear();
    a->saved.shrink_to_fit();
    a->native_cycled = true;
    ledger::add(a->id, physical_device_of(*a), a->size);
  }
  for (auto &[va, m] : s.mappings) {
    const Allocation &a = *s.allocations.at(m.handle);
    if (!backing::place(a, m.offset, m.va, m.size, backing::protection(m.access))) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

}  // namespace simcuda::vmm
