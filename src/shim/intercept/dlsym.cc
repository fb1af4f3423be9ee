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
#include <dlfcn.h>

#include "shim/driver/libraries.h"
#include "shim/driver/replacement.h"

#if !defined(__x86_64__)
#error "dlsym.cc: the dlsym tail-call trampoline is written for x86-64 only"
#endif

// glibc's dlsym as the trampoline reads it (driver/libraries.cc writes it once).
extern "C" {
__attribute__((visibility("hidden"))) extern void* cusnap_real_dlsym_pointer;
__attribute__((visibility("hidden"))) void* cusnap_resolve_real_dlsym();
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

// dlsym on an explicit handle (the trampoline's other branch).
extern "C" void* cusnap_dlsym_explicit(void* handle, const char* name) {
  using namespace cusnap::shim;
  void* found = real_dlsym()(handle, name);
  // Every table symbol starts with "cu": anything else is answered without more work.
  if (found == nullptr || name == nullptr || name[0] != 'c' || name[1] != 'u') return found;
  RememberIfCuda(handle);
  const void* wrapper = wrapper_for_symbol(name);
  if (wrapper == nullptr) return found;
  Dl_info provider{};
  if (dladdr(found, &provider) == 0 || provider.dli_fname == nullptr ||
      cuda_library_of(provider.dli_fname) == CudaLibrary::kNone) {
    return found;
  }
  return const_cast<void*>(wrapper);
}
