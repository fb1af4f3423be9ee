// Resolution of the real driver and runtime tables (driver_api.h). Both are published through
// an atomic pointer: a thread that finds nothing published resolves a table of its own and
// tries to publish it; the loser of a race frees its copy. Nobody ever waits for another
// thread, so first use from inside a library constructor (loader lock held) cannot deadlock
// against a thread that is resolving and needs the loader lock for dlopen (SPEC-REFERENCE
// C.5: a pthread_once here has deadlocked before).
#include "shim/driver/driver_api.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <new>

#include "shim/driver/libraries.h"
#include "shim/driver/replacement.h"

namespace cusnap::shim {
namespace {

// The search flags a row is resolved with: DEFAULT rows as a plain caller asks (NCCL's
// cudawrap passes CU_GET_PROC_ADDRESS_DEFAULT), PTSZ rows with the per-thread flag.
constexpr cuuint64_t kDriverFlags_DEFAULT = CU_GET_PROC_ADDRESS_DEFAULT;
constexpr cuuint64_t kDriverFlags_PTSZ = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

// The program's libcuda: the handle it gave dlsym, else the one already loaded, else load it
// (RTLD_LOCAL: the shim must not change the program's global symbol scope). The reference
// taken here is never dropped: the real pointers must outlive every wrapper call.
void* open_libcuda() {
  if (void* handle = remembered_handle(CudaLibrary::kDriver)) return handle;
  if (void* handle = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW)) return handle;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  dlerror();  // a failed attempt must not show up in the program's next dlerror()
  return handle;
}

// One row through the real resolver: nullptr unless it succeeded with status SUCCESS.
void* resolve_row(GetProcAddressV2 get_proc_address, const char* api_name, int since,
                  cuuint64_t flags) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get_proc_address(api_name, &pointer, since, flags, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS) {
    return nullptr;
  }
  // A driver that resolves its own names through the global scope would hand back the
  // shim's wrappers; taking those as real pointers would make every wrapper call itself.
  return is_wrapper(pointer) ? nullptr : pointer;
}

// Where each driver row's pointer lives in a DriverApi, with what identifies its ABI.
struct RowSlot {
  const char* api_name;
  int since;
  bool per_thread;
  size_t offset;
};
constexpr bool kPerThread_DEFAULT = false;
constexpr bool kPerThread_PTSZ = true;
constexpr RowSlot kSlots[] = {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  {api_name, since, kPerThread_##variant, offsetof(DriverApi, symbol)},
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  {api_name, since, kPerThread_##variant, offsetof(DriverApi, symbol)},
#include "shim/driver/gated_entry_points.def"
};

void*& slot_of(DriverApi& table, const RowSlot& slot) {
  return *reinterpret_cast<void**>(reinterpret_cast<char*>(&table) + slot.offset);
}

// A driver that lacks a newer ABI answers its `since` with an older one (the simulated driver
// has no cuCtxCreate_v3, so asking at 11040 gives cuCtxCreate_v2): that pointer is not the
// newer row's function, and calling it through the newer row's parameters would be wrong.
// The newer row is left empty (its wrapper answers CUDA_ERROR_NOT_FOUND; a resolver hands out
// the older row's wrapper, whose real pointer it is).
void drop_older_abis(DriverApi& table) {
  for (const RowSlot& newer : kSlots) {
    void*& pointer = slot_of(table, newer);
    if (pointer == nullptr) continue;
    for (const RowSlot& older : kSlots) {
      if (older.since < newer.since && older.per_thread == newer.per_thread &&
          slot_of(table, older) == pointer && std::strcmp(older.api_name, newer.api_name) == 0) {
        pointer = nullptr;
        break;
      }
    }
  }
}

void fill_driver(DriverApi& table) {
  void* libcuda = open_libcuda();
  if (libcuda == nullptr) return;
  auto get_proc_address =
      reinterpret_cast<GetProcAddressV2>(real_dlsym()(libcuda, "cuGetProcAddress_v2"));
  if (get_proc_address == nullptr) return;
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  table.symbol = reinterpret_cast<decltype(table.symbol)>(                 \
      resolve_row(get_proc_address, api_name, since, kDriverFlags_##variant));
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  table.symbol = reinterpret_cast<decltype(table.symbol)>(                 \
      resolve_row(get_proc_address, api_name, since, kDriverFlags_##variant));
#include "shim/driver/gated_entry_points.def"
  drop_older_abis(table);
}

// The program's libcudart: the handle it gave dlsym, else one loaded under a known soname.
// nullptr when none is loaded (the rows are then looked up with RTLD_NEXT, i.e. in the
// libraries after the shim in the global scope).
void* find_libcudart() {
  if (void* handle = remembered_handle(CudaLibrary::kRuntime)) return handle;
  for (const char* soname : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    if (void* handle = dlopen(soname, RTLD_NOLOAD | RTLD_NOW)) return handle;
  }
  dlerror();  // the failed attempts must not show up in the program's next dlerror()
  return RTLD_NEXT;
}

// True when at least one runtime row was found.
bool fill_runtime(RuntimeApi& table) {
  void* libcudart = find_libcudart();
  DlsymFunction lookup = real_dlsym();
  bool found = false;
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args)           \
  table.symbol = reinterpret_cast<decltype(table.symbol)>(lookup(libcudart, #symbol)); \
  found = found || table.symbol != nullptr;
#include "shim/driver/entry_points.def"
  using RuntimeGetVersion = cudaError_t (*)(int*);
  auto get_version = reinterpret_cast<RuntimeGetVersion>(lookup(libcudart, "cudaRuntimeGetVersion"));
  int version = 0;
  if (get_version != nullptr && get_version(&version) == cudaSuccess) table.version = version;
  return found;
}

std::atomic<const DriverApi*> g_driver{nullptr};
std::atomic<const RuntimeApi*> g_runtime{nullptr};
// Answers while nothing is published (out of memory; no runtime loaded yet). Constant-
// initialized, so reading them needs no guard either.
constinit const DriverApi kNoDriver{};
constinit const RuntimeApi kNoRuntime{};

// Publishes `mine` unless another thread was first; returns the published table.
template <typename Table>
const Table& publish(std::atomic<const Table*>& slot, Table* mine) {
  const Table* expected = nullptr;
  if (slot.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) return *mine;
  delete mine;
  return *expected;
}

}  // namespace

const DriverApi& driver() {
  if (const DriverApi* table = g_driver.load(std::memory_order_acquire)) return *table;
  auto* mine = new (std::nothrow) DriverApi{};
  if (mine == nullptr) return kNoDriver;
  fill_driver(*mine);
  return publish(g_driver, mine);
}

const RuntimeApi& runtime() {
  if (const RuntimeApi* table = g_runtime.load(std::memory_order_acquire)) return *table;
  auto* mine = new (std::nothrow) RuntimeApi{};
  if (mine == nullptr) return kNoRuntime;
  if (!fill_runtime(*mine)) {
    delete mine;
    return kNoRuntime;
  }
  return publish(g_runtime, mine);
}

}  // namespace cusnap::shim
