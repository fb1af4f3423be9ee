// cuMemGetInfo per device from the demo's process (demo_memory.h).
#include "demo/demo_memory.h"

#include <cuda.h>
#include <dlfcn.h>

#include "common/text.h"
#include "coordinator/native/native_driver.h"

namespace cusnap::cli::demo {

struct MemoryProbe::Entry {
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*release)(CUdevice) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*mem_get_info)(size_t*, size_t*) = nullptr;
  std::vector<CUcontext> contexts;  ///< primary context per device
};

namespace {

template <typename F>
bool Resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(handle, name));
  return out != nullptr;
}

Error DeviceError(int device, const char* call, CUresult rc) {
  return Error{static_cast<int>(rc), "device " + std::to_string(device) + ": " + call +
                                         " failed: " + CuResultText(rc)};
}

}  // namespace

Result<std::unique_ptr<MemoryProbe>> MemoryProbe::Open(const std::string& library, int devices) {
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return Error{-1, "cannot load " + library + ": " + (why ? why : "?")};
  }
  auto e = std::make_unique<Entry>();
  if (!Resolve(handle, "cuDeviceGet", e->device_get) ||
      !Resolve(handle, "cuDevicePrimaryCtxRetain", e->retain) ||
      (!Resolve(handle, "cuDevicePrimaryCtxRelease_v2", e->release) &&
       !Resolve(handle, "cuDevicePrimaryCtxRelease", e->release)) ||
      !Resolve(handle, "cuCtxSetCurrent", e->set_current) ||
      !Resolve(handle, "cuMemGetInfo_v2", e->mem_get_info)) {
    ::dlclose(handle);
    return Error{-1, library + " lacks cuMemGetInfo_v2 or the primary context calls"};
  }
  std::unique_ptr<MemoryProbe> probe(new MemoryProbe(handle, std::move(e), devices));
  for (int d = 0; d < devices; ++d) {
    CUdevice device = 0;
    CUcontext context = nullptr;
    CUresult rc = probe->e_->device_get(&device, d);
    if (rc != CUDA_SUCCESS) return DeviceError(d, "cuDeviceGet", rc);
    rc = probe->e_->retain(&context, device);
    if (rc != CUDA_SUCCESS) return DeviceError(d, "cuDevicePrimaryCtxRetain", rc);
    probe->e_->contexts.push_back(context);
  }
  return probe;
}

MemoryProbe::MemoryProbe(void* handle, std::unique_ptr<Entry> entry, int devices)
    : handle_(handle), e_(std::move(entry)), devices_(devices) {}

MemoryProbe::~MemoryProbe() {
  e_->set_current(nullptr);
  for (size_t d = 0; d < e_->contexts.size(); ++d) {
    CUdevice device = 0;
    if (e_->device_get(&device, static_cast<int>(d)) == CUDA_SUCCESS) e_->release(device);
  }
  ::dlclose(handle_);
}

Result<std::vector<DeviceMemory>> MemoryProbe::Read() {
  std::vector<DeviceMemory> out;
  for (int d = 0; d < devices_; ++d) {
    CUresult rc = e_->set_current(e_->contexts[static_cast<size_t>(d)]);
    if (rc != CUDA_SUCCESS) return DeviceError(d, "cuCtxSetCurrent", rc);
    size_t free_bytes = 0, total_bytes = 0;
    rc = e_->mem_get_info(&free_bytes, &total_bytes);
    if (rc != CUDA_SUCCESS) return DeviceError(d, "cuMemGetInfo", rc);
    out.push_back(DeviceMemory{d, total_bytes - free_bytes, total_bytes});
  }
  e_->set_current(nullptr);
  return out;
}

}  // namespace cusnap::cli::demo
