// libcudart.so.13, minimal: version queries, the driver entry-point resolvers, devices, malloc,
// memcpy, synchronize and errors. It reaches the driver the way NVIDIA's runtime does:
// dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), and every driver function through that
// resolver (so an interposer on dlsym or cuGetProcAddress sees every lookup).
//
// CUresult and cudaError_t share their numbers for every result this runtime can pass on
// (invalid value 1, out of memory 2, not initialized 3, no device 100, invalid device 101,
// invalid context 201 = cudaErrorDeviceUninitialized, ...), so results pass through unchanged.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDART_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace simcuda::runtime {
namespace {

constexpr int kRuntimeVersion = 13000;

// The driver functions this runtime uses, resolved once.
struct Driver {
  cudaError_t load_result = cudaErrorInitializationError;
  decltype(&cuGetProcAddress_v2) get_proc_address = nullptr;  // what cuGetProcAddress resolves to at 12000
  decltype(&cuInit) init = nullptr;
  decltype(&cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&cuDeviceGetCount) device_get_count = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&cuCtxGetCurrent) ctx_get_current = nullptr;
  decltype(&cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&cuMemFree_v2) mem_free = nullptr;
  decltype(&cuMemcpy) memcpy = nullptr;
  CUcontext primary[8] = {};  // retained once per device, on first use
  std::mutex mutex;
};

template <typename Fn>
bool resolve(decltype(&cuGetProcAddress_v2) get, const char *name, int version, Fn *out) {
  void *p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (get(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || p == nullptr) return false;
  *out = reinterpret_cast<Fn>(p);
  return true;
}

Driver *load() {
  auto *d = new Driver;  // never destroyed: runtime calls may come during exit
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "simcuda cudart[%d]: cannot load libcuda.so.1: %s\n", static_cast<int>(getpid()), dlerror());
    d->load_result = cudaErrorInsufficientDriver;
    return d;
  }
  auto bootstrap = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(lib, "cuGetProcAddress_v2"));
  void *resolver = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (bootstrap == nullptr || bootstrap("cuGetProcAddress", &resolver, 12000, 0, &status) != CUDA_SUCCESS ||
      resolver == nullptr) {
    d->load_result = cudaErrorInsufficientDriver;
    return d;
  }
  auto get = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(resolver);
  d->get_proc_address = get;
  bool ok = resolve(get, "cuInit", 2000, &d->init) && resolve(get, "cuDriverGetVersion", 2020, &d->driver_get_version) &&
            resolve(get, "cuDeviceGetCount", 2000, &d->device_get_count) &&
            resolve(get, "cuDevicePrimaryCtxRetain", 7000, &d->primary_ctx_retain) &&
            resolve(get, "cuCtxGetCurrent", 4000, &d->ctx_get_current) &&
            resolve(get, "cuCtxSetCurrent", 4000, &d->ctx_set_current) &&
            resolve(get, "cuCtxSynchronize", 2000, &d->ctx_synchronize) &&
            resolve(get, "cuMemAlloc", 3020, &d->mem_alloc) && resolve(get, "cuMemFree", 3020, &d->mem_free) &&
            resolve(get, "cuMemcpy", 4000, &d->memcpy);
  if (!ok) {
    d->load_result = cudaErrorInsufficientDriver;
    return d;
  }
  d->load_result = static_cast<cudaError_t>(d->init(0));
  return d;
}

Driver &driver() {
  static Driver *d = load();
  return *d;
}

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

// Records a failure for cudaGetLastError and returns it.
cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

cudaError_t from(CUresult r) { return record(static_cast<cudaError_t>(r)); }

// Makes the thread's device's primary context current if the thread has none.
cudaError_t ensure_context() {
  Driver &d = driver();
  if (d.load_result != cudaSuccess) return record(d.load_result);
  CUcontext ctx = nullptr;
  if (CUresult r = d.ctx_get_current(&ctx); r != CUDA_SUCCESS) return from(r);
  if (ctx != nullptr) return cudaSuccess;
  {
    std::lock_guard lock(d.mutex);
    auto &primary = d.primary[current_device];
    if (primary == nullptr) {
      if (CUresult r = d.primary_ctx_retain(&primary, current_device); r != CUDA_SUCCESS) return from(r);
    }
    ctx = primary;
  }
  return from(d.ctx_set_current(ctx));
}

cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult *driverStatus) {
  if (symbol == nullptr || funcPtr == nullptr) return record(cudaErrorInvalidValue);
  if (flags > cudaEnablePerThreadDefaultStream) return record(cudaErrorInvalidValue);
  Driver &d = driver();
  if (d.get_proc_address == nullptr) return record(d.load_result);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  // cudaEnable* flags carry the same values as CU_GET_PROC_ADDRESS_*.
  CUresult r = d.get_proc_address(symbol, funcPtr, static_cast<int>(version), flags, &status);
  if (r != CUDA_SUCCESS) return from(r);
  if (driverStatus != nullptr) {
    *driverStatus = status == CU_GET_PROC_ADDRESS_SUCCESS        ? cudaDriverEntryPointSuccess
                    : status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ? cudaDriverEntryPointSymbolNotFound
                                                                     : cudaDriverEntryPointVersionNotSufficent;
  }
  return cudaSuccess;
}

unsigned long long per_thread_default(unsigned long long flags) {
  return flags == cudaEnableDefault ? static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream) : flags;
}

cudaError_t copy(void *dst, const void *src, size_t count) {
  if (cudaError_t e = ensure_context(); e != cudaSuccess) return e;
  return from(driver().memcpy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), count));
}

}  // namespace
}  // namespace simcuda::runtime

namespace rt = simcuda::runtime;

extern "C" {

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == nullptr) return rt::record(cudaErrorInvalidValue);
  *runtimeVersion = rt::kRuntimeVersion;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == nullptr) return rt::record(cudaErrorInvalidValue);
  rt::Driver &d = rt::driver();
  if (d.driver_get_version == nullptr) {
    *driverVersion = 0;  // no driver: version 0, as the CUDA runtime reports it
    return cudaSuccess;
  }
  return rt::from(d.driver_get_version(driverVersion));
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult *driverStatus) {
  return rt::entry_point(symbol, funcPtr, rt::kRuntimeVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult *driverStatus) {
  return rt::entry_point(symbol, funcPtr, rt::kRuntimeVersion, rt::per_thread_default(flags), driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult *driverStatus) {
  return rt::entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult *driverStatus) {
  return rt::entry_point(symbol, funcPtr, cudaVersion, rt::per_thread_default(flags), driverStatus);
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (count == nullptr) return rt::record(cudaErrorInvalidValue);
  rt::Driver &d = rt::driver();
  if (d.load_result != cudaSuccess) return rt::record(d.load_result);
  return rt::from(d.device_get_count(count));
}

cudaError_t cudaSetDevice(int device) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) return e;
  if (device < 0 || device >= count) return rt::record(cudaErrorInvalidDevice);
  rt::current_device = device;
  rt::Driver &d = rt::driver();
  CUcontext ctx = nullptr;
  {
    std::lock_guard lock(d.mutex);
    auto &primary = d.primary[device];
    if (primary == nullptr) {
      if (CUresult r = d.primary_ctx_retain(&primary, device); r != CUDA_SUCCESS) return rt::from(r);
    }
    ctx = primary;
  }
  return rt::from(d.ctx_set_current(ctx));
}

cudaError_t cudaGetDevice(int *device) {
  if (device == nullptr) return rt::record(cudaErrorInvalidValue);
  *device = rt::current_device;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (devPtr == nullptr) return rt::record(cudaErrorInvalidValue);
  if (cudaError_t e = rt::ensure_context(); e != cudaSuccess) return e;
  CUdeviceptr p = 0;
  if (CUresult r = rt::driver().mem_alloc(&p, size); r != CUDA_SUCCESS) return rt::from(r);
  *devPtr = reinterpret_cast<void *>(p);
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (cudaError_t e = rt::ensure_context(); e != cudaSuccess) return e;
  return rt::from(rt::driver().mem_free(reinterpret_cast<CUdeviceptr>(devPtr)));
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return rt::record(cudaErrorInvalidMemcpyDirection);
  return rt::copy(dst, src, count);
}

cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return rt::record(cudaErrorInvalidMemcpyDirection);
  return rt::copy(dst, src, count);
}

cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = rt::ensure_context(); e != cudaSuccess) return e;
  return rt::from(rt::driver().ctx_synchronize());
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = rt::last_error;
  rt::last_error = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorDeviceUninitialized: return "invalid device context";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorTimeout: return "timeout";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return "unrecognized error code";
  }
}

}  // extern "C"
