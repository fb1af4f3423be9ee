// The simulated driver as a DriverApi (carrier_sim_driver.h).
#include "carrier_sim_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cusnap::test {
namespace {

void* Library() {
  static void* handle = [] {
    const char* dir = std::getenv("CUSNAP_TEST_SIMCUDA_DIR");
    if (dir == nullptr) {
      std::fprintf(stderr, "CUSNAP_TEST_SIMCUDA_DIR is not set (run the test through ctest)\n");
      std::abort();
    }
    const std::string path = std::string(dir) + "/libcuda.so.1";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      std::fprintf(stderr, "cannot load the simulated driver %s: %s\n", path.c_str(), dlerror());
      std::abort();
    }
    return h;
  }();
  return handle;
}

template <typename Fn>
void Load(Fn*& slot, const char* symbol) {
  slot = reinterpret_cast<Fn*>(dlsym(Library(), symbol));
}

}  // namespace

void* SimSymbol(const char* name) { return dlsym(Library(), name); }

const shim::DriverApi& SimDriver() {
  static const shim::DriverApi api = [] {
    shim::DriverApi a{};
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) Load(a.symbol, #symbol);
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) Load(a.symbol, #symbol);
#include "shim/driver/gated_entry_points.def"
    auto init = reinterpret_cast<CUresult (*)(unsigned)>(SimSymbol("cuInit"));
    if (init == nullptr || init(0) != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuInit of the simulated driver failed\n");
      std::abort();
    }
    return a;
  }();
  return api;
}

}  // namespace cusnap::test

// The shim's driver() in test programs that link shim sources.
const cusnap::shim::DriverApi& cusnap::shim::driver() { return cusnap::test::SimDriver(); }
