// The shim's `dlsym`: a program (or the CUDA runtime) that looks a driver or runtime entry
// point up by name gets the shim's wrapper instead of the library's function.
//
// Scope of the caller. glibc's dlsym decides what RTLD_NEXT (and, across link-map
// namespaces, RTLD_DEFAULT) means from its return address: "the objects after the one that
// called me". If the shim called the real dlsym from C++, glibc would search after the
// *shim*, and a second interposer loaded after the shim asking RTLD_NEXT for its own symbol
// would get itself back and recurse (SPEC-REFERENCE C.5, matured requirement (1)); the
// sanitizer runtimes, which find the functions they wrap this way, would break the same way.
// So `dlsym` is a few instructions of assembly: RTLD_DEFAULT and RTLD_NEXT jump straight
// into glibc's dlsym (a true tail call: glibc sees the program's return address, so the
// search scope is the caller's), and only explicit handles come to C++. GCC 12 has no
// guaranteed tail call (musttail arrives in GCC 15), hence the assembly.
//
// Why RTLD_DEFAULT / RTLD_NEXT still land in the shim: the shim is LD_PRELOADed, so in the
// global scope it precedes libcuda and libcudart and exports every table symbol; a lookup
// from the program, or from any object before the shim, finds the shim's wrapper first. An
// object loaded after the shim that asks for RTLD_NEXT gets what follows it (libcuda's own
// function), which is what "next" means for an interposer chain.
//
// Explicit handles: the real dlsym answers; when the answer lies in a library whose basename
// starts with "libcuda.so" or "libcudart.so" and the name is a table symbol, the wrapper of
// that symbol replaces it (dlsym(h, "cuMulticastBindMem_v2") gives that wrapper). A same-named
// symbol from any other library is never replaced (SPEC-REFERENCE C.5 (4)).
#include "shim/intercept/dlsym.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "shim/intercept/replacement.h"

#if !defined(__x86_64__)
#error "dlsym.cc: the dlsym tail-call trampoline is written for x86-64 only"
#endif

// glibc's dlsym, read by the trampoline below with a plain aligned 64-bit load (atomic on
// x86-64); written once by cusnap_resolve_real_dlsym. extern "C" so the assembly can name it.
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

extern "C" __attribute__((visibility("hidden"))) void* cusnap_dlsym_explicit(void* handle,
                                                                           const char* name);

// dlsym(handle, name): RTLD_DEFAULT (0) and RTLD_NEXT (-1) tail-jump into glibc's dlsym;
// everything else tail-jumps into cusnap_dlsym_explicit. Until the real dlsym is known the
// two argument registers are saved around cusnap_resolve_real_dlsym (stack kept 16-byte
// aligned for the call).
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  cmpq $-1, %rdi
  je 1f
  testq %rdi, %rdi
  je 1f
  jmp cusnap_dlsym_explicit
1:
  movq cusnap_real_dlsym_pointer(%rip), %rax
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call cusnap_resolve_real_dlsym
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  je 3f
  jmp *%rax
3:
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");

namespace cusnap::shim {
namespace {

std::atomic<void*> g_libcuda_handle{nullptr};
std::atomic<void*> g_libcudart_handle{nullptr};

const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

// Keeps the first libcuda / libcudart handle the program used, with a reference of the
// shim's own (an RTLD_NOLOAD dlopen of the same file) so a later dlclose by the program
// cannot unload the library under the real-pointer tables.
void remember_if_cuda(void* handle) {
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

}  // namespace

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

// dlsym on an explicit handle (the trampoline's other branch).
extern "C" void* cusnap_dlsym_explicit(void* handle, const char* name) {
  using namespace cusnap::shim;
  void* found = real_dlsym()(handle, name);
  // Every table symbol starts with "cu": anything else is answered without more work.
  if (found == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return found;
  remember_if_cuda(handle);
  const void* wrapper = wrapper_for_symbol(name);
  if (wrapper == nullptr) return found;
  Dl_info provider{};
  if (dladdr(found, &provider) == 0 || provider.dli_fname == nullptr ||
      cuda_library_of(provider.dli_fname) == CudaLibrary::kNone) {
    return found;
  }
  return const_cast<void*>(wrapper);
}
