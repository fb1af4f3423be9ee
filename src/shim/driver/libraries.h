// How the shim finds the real CUDA libraries: glibc's own dlsym (the shim exports a `dlsym`,
// intercept/dlsym.cc, so a plain call would come back to the shim), and the libcuda /
// libcudart handles the program opened itself, which that interposer remembers here and the
// real tables (driver_api.h) are resolved from.
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

/// Keeps `handle` (one the program passed to dlsym) when it is the first libcuda or
/// libcudart seen, with a reference of the shim's own (an RTLD_NOLOAD dlopen of the same
/// file) so a later dlclose by the program cannot unload the library under the real tables.
void RememberIfCuda(void* handle);

/// The libcuda (kDriver) or libcudart (kRuntime) handle the program passed to dlsym, with a
/// reference of the shim's own so it stays loaded; nullptr until the program used one.
void* remembered_handle(CudaLibrary library);

}  // namespace cusnap::shim
