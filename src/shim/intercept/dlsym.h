// What the rest of the shim needs from the dlsym interposer (dlsym.cc): glibc's own dlsym
// (the shim exports a `dlsym`, so a plain call would come back to the shim), and the
// libcuda / libcudart handles the program opened itself, kept for real-symbol lookups.
#pragma once

namespace cusnap::shim {

using DlsymFunction = void* (*)(void* handle, const char* name);

/// glibc's dlsym, found with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34") and, on older glibc,
/// "GLIBC_2.2.5". Never nullptr on a glibc system; cached without a once-guard (the lookup
/// is idempotent and must not wait on anything while the loader lock may be held).
DlsymFunction real_dlsym();

/// Which CUDA library a file is, from its basename ("libcuda.so*" / "libcudart.so*").
enum class CudaLibrary { kNone, kDriver, kRuntime };
CudaLibrary cuda_library_of(const char* path);

/// The libcuda (kDriver) or libcudart (kRuntime) handle the program passed to dlsym, with a
/// reference of the shim's own so it stays loaded; nullptr until the program used one.
void* remembered_handle(CudaLibrary library);

}  // namespace cusnap::shim
