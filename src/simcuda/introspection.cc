// Test-only introspection hooks (include/simcuda/introspection.h).
#include "simcuda/introspection.h"

#include "faults.h"
#include "gate.h"
#include "ledger.h"
#include "vmm.h"

#include <mutex>

namespace simcuda {
namespace {

simcuda_mapping_info describe(const vmm::State &s, const vmm::Mapping &m) {
  const vmm::Allocation &a = *s.allocations.at(m.handle);
  simcuda_mapping_info info{};
  info.va = m.va;
  info.size = m.size;
  info.offset = m.offset;
  info.allocation_id = a.id;
  info.allocation_handle = a.handle;
  info.allocation_size = a.size;
  info.location_type = a.prop.location.type;
  info.location_id = a.prop.location.id;
  info.imported = a.imported ? 1 : 0;
  info.native_cycled = a.native_cycled ? 1 : 0;
  for (size_t i = 0; i < m.access.size(); ++i) info.access[i] = m.access[i];
  return info;
}

}  // namespace
}  // namespace simcuda

extern "C" {

int simcuda_test_mapping_at(uint64_t va, simcuda_mapping_info *out) {
  auto &s = simcuda::vmm::state();
  std::lock_guard lock(s.mutex);
  auto it = s.mappings.upper_bound(va);
  if (out == nullptr || it == s.mappings.begin()) return -1;
  --it;
  if (va >= it->second.va + it->second.size) return -1;
  *out = simcuda::describe(s, it->second);
  return 0;
}

size_t simcuda_test_mappings(simcuda_mapping_info *out, size_t max) {
  auto &s = simcuda::vmm::state();
  std::lock_guard lock(s.mutex);
  size_t i = 0;
  for (const auto &[va, m] : s.mappings) {
    if (out != nullptr && i < max) out[i] = simcuda::describe(s, m);
    ++i;
  }
  return i;
}

size_t simcuda_test_allocation_count(void) {
  auto &s = simcuda::vmm::state();
  std::lock_guard lock(s.mutex);
  return s.allocations.size();
}

uint64_t simcuda_test_bytes_in_use(int device) {
  auto &s = simcuda::vmm::state();
  std::lock_guard lock(s.mutex);
  uint64_t total = 0;
  for (const auto &[handle, a] : s.allocations)
    if (!a->multicast && a->backing != nullptr && simcuda::vmm::physical_device_of(*a) == device)
      total += a->size;
  return total;
}

uint64_t simcuda_test_ledger_bytes(int device) {
  return simcuda::ledger::bytes_in_use(device);
}

int simcuda_test_calls_in_flight(void) { return simcuda::gate::in_flight(); }

void simcuda_test_inject_fault(const char *api_name, unsigned nth, int result) {
  simcuda::faults::inject(api_name, nth, static_cast<CUresult>(result));
}

}  // extern "C"
