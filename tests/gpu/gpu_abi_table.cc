// gpu_abi_table: checks the interception table against the real driver. For every
// driver row of entry_points.def and of the generated gated_entry_points.def, the driver's
// own resolver is asked for the row's api_name at the row's `since` version (with the
// per-thread flag for PTSZ rows), and its answer compared with the row's exported symbol
// (dlsym on libcuda.so.1): the shim fills its real-pointer table the first way and wraps the
// ABI of the second, so they must be the same function. Prints the mismatches, then
//   ABI TABLE rows <n> match <m> absent <a> unexported <u> mismatch <x>
// (absent: the driver does not resolve the row; unexported: it resolves it but exports no
// symbol of that name, so nothing to compare) and exits 0 when there is no mismatch.
#include <dlfcn.h>

#include <cstdio>
#include <iterator>

#include "shim/driver/cuda_abi.h"

namespace {

struct Row {
  const char* symbol;
  const char* api_name;
  int since;
  bool per_thread;
};
constexpr bool kPerThread_DEFAULT = false;
constexpr bool kPerThread_PTSZ = true;
constexpr Row kRows[] = {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, since, kPerThread_##variant},
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, since, kPerThread_##variant},
#include "shim/driver/gated_entry_points.def"
};

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

}  // namespace

int main() {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda == nullptr) {
    std::printf("ABI TABLE: no libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(libcuda, "cuInit"));
  auto resolve = reinterpret_cast<GetProcAddress>(dlsym(libcuda, "cuGetProcAddress_v2"));
  if (init == nullptr || resolve == nullptr || init(0) != CUDA_SUCCESS) {
    std::printf("ABI TABLE: the driver does not initialise\n");
    return 2;
  }
  int driver_version = 0;
  auto get_version = reinterpret_cast<CUresult (*)(int*)>(dlsym(libcuda, "cuDriverGetVersion"));
  if (get_version != nullptr) get_version(&driver_version);
  int match = 0, absent = 0, unexported = 0, mismatch = 0;
  for (const Row& row : kRows) {
    void* resolved = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const cuuint64_t flags =
        row.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (row.since > driver_version || resolve(row.api_name, &resolved, row.since, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS || resolved == nullptr) {
      ++absent;
      continue;
    }
    void* exported = dlsym(libcuda, row.symbol);
    if (exported == nullptr) {
      ++unexported;
    } else if (exported == resolved) {
      ++match;
    } else {
      ++mismatch;
      Dl_info info{};
      const char* name = dladdr(resolved, &info) != 0 && info.dli_sname != nullptr ? info.dli_sname : "?";
      std::printf("mismatch: %s asked at %d%s gives %s (%p), the row's symbol %s is %p\n", row.api_name,
                  row.since, row.per_thread ? " per-thread" : "", name, resolved, row.symbol, exported);
    }
  }
  std::printf("ABI TABLE driver %d rows %zu match %d absent %d unexported %d mismatch %d\n", driver_version,
              std::size(kRows), match, absent, unexported, mismatch);
  return mismatch == 0 ? 0 : 1;
}
