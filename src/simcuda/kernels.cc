// Modules and kernel launches (CUDA Driver API, "Module Management", "Execution Control").
// simcuda runs no device code: cuModuleLoadData accepts the built-in module, whose image is
// the string "simcuda:builtin", and its functions are kernels implemented here, run on the
// launch's stream like any other stream work (streams.h). Their parameters (kernelParams[i]
// points at argument i, as in CUDA):
//   fill_u32(CUdeviceptr dst, unsigned value, size_t count)    dst[i] = value
//   add_u32(CUdeviceptr dst, unsigned value, size_t count)     dst[i] += value
//   copy_u32(CUdeviceptr dst, CUdeviceptr src, size_t count)   dst[i] = src[i]
//   wait_u32(CUdeviceptr word, unsigned value)                 spins until *word == value
//   chunk_nonzero_u64(CUdeviceptr src, size_t bytes, size_t chunk, CUdeviceptr flags)
//       flags[c] = 1 (a u32) for every chunk c of `chunk` bytes of src[0, bytes) holding a
//       non-zero byte; other flags untouched (the zero-chunk scan of cusnap's carrier)
// A PTX image (text holding ".version" and ".entry") is accepted as well, as the driver's
// JIT would: its functions are the `.entry` names it declares that are built in here; any
// other name answers CUDA_ERROR_NOT_FOUND. That lets a program ship one PTX string for real
// GPUs and run the same calls here.
// wait_u32 models a collective that waits for its peer: it never finishes while the peer's
// write is held back. The grid and block shape are validated and otherwise ignored.
#include "api_call.h"
#include "device_copy.h"
#include "streams.h"
#include "vmm.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>
#include <thread>

namespace simcuda::kernels {

enum class Kernel { kFill, kAdd, kCopy, kWait, kChunkNonzero };

}  // namespace simcuda::kernels

struct CUmod_st {
  bool ptx = false;               // loaded from PTX text: only its entries are functions
  std::vector<std::string> entries;  // the `.entry` names of a PTX image
};
struct CUfunc_st {
  CUmodule module = nullptr;
  simcuda::kernels::Kernel kernel = simcuda::kernels::Kernel::kFill;
};

namespace simcuda::kernels {
namespace {

constexpr std::string_view kBuiltinImage = "simcuda:builtin";

struct Registry {
  std::mutex mutex;
  std::set<CUmodule> modules;
  std::set<CUfunction> functions;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed
  return *r;
}

bool known_function(CUfunction f) {
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  return r.functions.count(f) != 0;
}

// Device words [ptr, ptr + count) usable for reading, or writing when `write`.
bool device_words(CUdeviceptr ptr, size_t count, bool write) {
  bool device_memory = false;
  return ptr != 0 && ptr % sizeof(uint32_t) == 0 &&
         vmm::locate(ptr, count * sizeof(uint32_t), write, &device_memory) == CUDA_SUCCESS && device_memory;
}

template <typename T>
T arg(void **params, int i) {
  T value{};
  std::memcpy(&value, params[i], sizeof value);
  return value;
}

uint32_t *words(CUdeviceptr ptr) { return reinterpret_cast<uint32_t *>(ptr); }

// The work of one launch, arguments copied now (CUDA copies kernelParams at launch).
CUresult launch(CUfunction f, unsigned grid, unsigned block, CUstream stream, void **params, void **extra) {
  if (!known_function(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (grid == 0 || block == 0 || extra != nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  streams::Work work;
  switch (f->kernel) {
    case Kernel::kFill:
    case Kernel::kAdd: {
      const auto dst = arg<CUdeviceptr>(params, 0);
      const auto value = arg<unsigned>(params, 1);
      const auto count = arg<size_t>(params, 2);
      if (!device_words(dst, count, true)) return CUDA_ERROR_INVALID_VALUE;
      const bool add = f->kernel == Kernel::kAdd;
      work = [=] {
        if (!device_words(dst, count, true)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (size_t i = 0; i < count; ++i) words(dst)[i] = add ? words(dst)[i] + value : value;
        return CUDA_SUCCESS;
      };
      break;
    }
    case Kernel::kCopy: {
      const auto dst = arg<CUdeviceptr>(params, 0);
      const auto src = arg<CUdeviceptr>(params, 1);
      const auto count = arg<size_t>(params, 2);
      if (!device_words(dst, count, true) || !device_words(src, count, false)) return CUDA_ERROR_INVALID_VALUE;
      work = [=] {
        if (!device_words(dst, count, true) || !device_words(src, count, false)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        device_copy(words(dst), words(src), count * sizeof(uint32_t));
        return CUDA_SUCCESS;
      };
      break;
    }
    case Kernel::kChunkNonzero: {
      const auto src = arg<CUdeviceptr>(params, 0);
      const auto bytes = arg<size_t>(params, 1);
      const auto chunk = arg<size_t>(params, 2);
      const auto flags = arg<CUdeviceptr>(params, 3);
      if (chunk == 0 || bytes % sizeof(uint64_t) != 0) return CUDA_ERROR_INVALID_VALUE;
      const size_t chunks = (bytes + chunk - 1) / chunk;
      const size_t words_in = bytes / sizeof(uint32_t);
      if (!device_words(src, words_in, false) || !device_words(flags, chunks, true)) return CUDA_ERROR_INVALID_VALUE;
      work = [=] {
        if (!device_words(src, words_in, false) || !device_words(flags, chunks, true)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        const auto *bytes_at = reinterpret_cast<const unsigned char *>(src);
        for (size_t c = 0; c < chunks; ++c) {
          const size_t end = std::min(bytes, (c + 1) * chunk);
          for (size_t i = c * chunk; i < end; ++i) {
            if (bytes_at[i] != 0) {
              words(flags)[c] = 1;
              break;
            }
          }
        }
        return CUDA_SUCCESS;
      };
      break;
    }
    case Kernel::kWait: {
      const auto word = arg<CUdeviceptr>(params, 0);
      const auto value = arg<unsigned>(params, 1);
      if (!device_words(word, 1, false)) return CUDA_ERROR_INVALID_VALUE;
      work = [=] {
        for (;;) {
          if (!device_words(word, 1, false)) return CUDA_ERROR_ILLEGAL_ADDRESS;
          if (std::atomic_ref<uint32_t>(*words(word)).load(std::memory_order_acquire) == value) {
            return CUDA_SUCCESS;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      };
      break;
    }
  }
  return streams::submit(stream, std::move(work));
}

// The `.entry` names a PTX text declares (into `entries`); false when it declares none.
bool ptx_entries(std::string_view text, std::vector<std::string> *entries) {
  constexpr std::string_view kEntry = ".entry";
  for (size_t at = text.find(kEntry); at != std::string_view::npos; at = text.find(kEntry, at + 1)) {
    size_t begin = at + kEntry.size();
    while (begin < text.size() && (text[begin] == ' ' || text[begin] == '\t')) ++begin;
    size_t end = begin;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    if (end > begin) entries->emplace_back(text.substr(begin, end - begin));
  }
  return !entries->empty();
}

CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->gridDimX * config->gridDimY * config->gridDimZ,
                config->blockDimX * config->blockDimY * config->blockDimZ, config->hStream, params, extra);
}

}  // namespace
}  // namespace simcuda::kernels

using namespace simcuda::kernels;  // NOLINT: entry points below are the module's exports

extern "C" {

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  SIMCUDA_CALL_INITIALIZED("cuModuleLoadData");
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::string_view text(static_cast<const char *>(image));
  auto *loaded = new CUmod_st{};
  if (text != kBuiltinImage) {
    if (text.find(".version") == std::string_view::npos || !ptx_entries(text, &loaded->entries)) {
      delete loaded;
      return CUDA_ERROR_INVALID_IMAGE;
    }
    loaded->ptx = true;
  }
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  r.modules.insert(loaded);
  *module = loaded;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule hmod) {
  SIMCUDA_CALL_INITIALIZED("cuModuleUnload");
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.modules.erase(hmod) == 0) return CUDA_ERROR_INVALID_HANDLE;
  // Queued launches copied what they run: the functions can go with their module.
  for (auto it = r.functions.begin(); it != r.functions.end();) {
    if ((*it)->module != hmod) {
      ++it;
      continue;
    }
    delete *it;
    it = r.functions.erase(it);
  }
  delete hmod;
  return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  SIMCUDA_CALL_INITIALIZED("cuModuleGetFunction");
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const std::string_view n(name);
  Kernel kernel;
  if (n == "fill_u32") kernel = Kernel::kFill;
  else if (n == "add_u32") kernel = Kernel::kAdd;
  else if (n == "copy_u32") kernel = Kernel::kCopy;
  else if (n == "wait_u32") kernel = Kernel::kWait;
  else if (n == "chunk_nonzero_u64") kernel = Kernel::kChunkNonzero;
  else return CUDA_ERROR_NOT_FOUND;
  Registry &r = registry();
  std::lock_guard lock(r.mutex);
  if (r.modules.count(hmod) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (hmod->ptx && std::find(hmod->entries.begin(), hmod->entries.end(), n) == hmod->entries.end()) {
    return CUDA_ERROR_NOT_FOUND;
  }
  auto *function = new CUfunc_st{hmod, kernel};
  r.functions.insert(function);
  *hfunc = function;
  return CUDA_SUCCESS;
}

SIMCUDA_BOTH_FORMS(CUresult, cuLaunchKernel, "cuLaunchKernel",
                   (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra),
                   {
                     (void)sharedMemBytes;
                     return launch(f, gridDimX * gridDimY * gridDimZ, blockDimX * blockDimY * blockDimZ,
                                   hStream, kernelParams, extra);
                   })
SIMCUDA_BOTH_FORMS(CUresult, cuLaunchKernelEx, "cuLaunchKernelEx",
                   (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
                   { return launch_ex(config, f, kernelParams, extra); })

}  // extern "C"
