// A second interposer for interception_probe's "scope" mode, preloaded *after* the shim
// (LD_PRELOAD=libcusnap.so:libinterception_interposer.so). It defines cuMemGetAccess, a
// table name, in a library that is not CUDA's (the shim must never replace it), and asks
// dlsym for RTLD_NEXT from its own code (glibc must search after this library, not after
// the shim whose dlsym is in between).
#include <dlfcn.h>

#include "shim/driver/cuda_abi.h"

/// dlsym(RTLD_NEXT, name) as this library's own code asks it.
extern "C" __attribute__((visibility("default"))) void* interposer_next(const char* name) {
  void* found = dlsym(RTLD_NEXT, name);
  // No tail call here: glibc takes the scope from dlsym's return address, which must lie in
  // this library (an optimized `return dlsym(...)` would jump, and the scope would become
  // the probe's).
  asm volatile("" : "+r"(found));
  return found;
}

/// A same-named symbol of a non-CUDA library; never called.
extern "C" __attribute__((visibility("default"))) CUresult cuMemGetAccess(unsigned long long*, const CUmemLocation*,
                                                                          CUdeviceptr) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
