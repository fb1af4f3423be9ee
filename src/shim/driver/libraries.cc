// How the shim finds the real CUDA libraries (libraries.h): glibc's own dlsym, and the
// libcuda / libcudart handles the program opened itself. The dlsym interposer
// (intercept/dlsym.cc) reads cusnap_real_dlsym_pointer from its trampoline and remembers
// the handles it sees here.
#include "shim/driver/libraries.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

// glibc's dlsym, read by the dlsym trampoline (intercept/dlsym.cc) with a plain aligned
// 64-bit load (atomic on x86-64); written once by cusnap_resolve_real_dlsym. extern "C" so the assembly can name it.
extern "C" {
__attribute__((visibility("hidden"))) void* cusnap_real_dlsym_pointer = nullptr;
}

// Finds glibc's dlsym. Runs the first time any dlsym call reaches the shim, which can be
// inside the sanitizer runtime's own initialization, before its shadow memory exists: so no
// instrumentation, no allocation, no locks.
extern "C" __attribute__((visibility("hidden"), no_sanitize("address", "undefined"))) void*
cusnap_resolve_real_dlsym() {
  void* real = __atomic_load_n(&cusnap_real_dlsym_pointer, __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (real == nullptr) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  __atomic_store_n(&cusnap_real_dlsym_pointer, real, __ATOMIC_RELEASE);
  return real;
}

namespace cusnap::shim {
namespace {

std::atomic<void*> g_libcuda_handle{nullptr};
std::atomic<void*> g_libcudart_handle{nullptr};

const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

}  // namespace

void RememberIfCuda(void* handle) {
  if (g_libcuda_handle.load(std::memory_order_acquire) != nullptr &&
      g_libcudart_handle.load(std::memory_order_acquire) != nullptr) {
    return;
  }
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return;
  std::atomic<void*>* slot = nullptr;
  switch (cuda_library_of(map->l_name)) {
    case CudaLibrary::kDriver:
      slot = &g_libcuda_handle;
      break;
    case CudaLibrary::kRuntime:
      slot = &g_libcudart_handle;
      break;
    case CudaLibrary::kNone:
      return;
  }
  if (slot->load(std::memory_order_acquire) != nullptr) return;
  void* own = dlopen(map->l_name, RTLD_NOLOAD | RTLD_NOW);
  if (own == nullptr) {
    dlerror();  // the program's dlsym succeeded: leave no error of ours for its dlerror()
    return;
  }
  void* expected = nullptr;
  if (!slot->compare_exchange_strong(expected, own, std::memory_order_acq_rel)) dlclose(own);
}

DlsymFunction real_dlsym() {
  void* real = __atomic_load_n(&cusnap_real_dlsym_pointer, __ATOMIC_ACQUIRE);
  if (real == nullptr) real = cusnap_resolve_real_dlsym();
  return reinterpret_cast<DlsymFunction>(real);
}

CudaLibrary cuda_library_of(const char* path) {
  const char* base = basename_of(path);
  if (std::strncmp(base, "libcuda.so", 10) == 0) return CudaLibrary::kDriver;
  if (std::strncmp(base, "libcudart.so", 12) == 0) return CudaLibrary::kRuntime;
  return CudaLibrary::kNone;
}

void* remembered_handle(CudaLibrary library) {
  switch (library) {
    case CudaLibrary::kDriver:
      return g_libcuda_handle.load(std::memory_order_acquire);
    case CudaLibrary::kRuntime:
      return g_libcudart_handle.load(std::memory_order_acquire);
    case CudaLibrary::kNone:
      break;
  }
  return nullptr;
}

}  // namespace cusnap::shim

