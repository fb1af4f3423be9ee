// interception_failclosed: runs with the shim preloaded and interception_fakecuda as
// libcuda.so.1 (LD_LIBRARY_PATH), asks the shim's resolvers for names whose ABI the fake
// driver answers with a known or an unknown function, and prints
//   <resolver>|<name>|<version>|<rc>|<status>|<null|shim|other>
// for interception_test.cc to check.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "shim/driver/cuda_abi.h"

int main() {
  const char* shim_path = std::getenv("CUSNAP_TEST_SHIM");
  void* shim = shim_path != nullptr ? dlopen(shim_path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  void* fake = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (shim == nullptr || fake == nullptr) {
    std::fprintf(stderr, "interception_failclosed: shim %p, fake libcuda %p: %s\n", shim, fake, dlerror());
    return 2;
  }
  using V2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  using Legacy = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto v2 = reinterpret_cast<V2>(dlsym(shim, "cuGetProcAddress_v2"));
  auto legacy = reinterpret_cast<Legacy>(dlsym(shim, "cuGetProcAddress"));
  auto classify = [&](void* pointer, const char* name) {
    if (pointer == nullptr) return "null";
    return pointer == dlsym(shim, name) ? "shim" : "other";
  };
  for (const char* name : {"cuMemCreate", "cuMemGetAccess"}) {
    for (int version : {12000, 13000}) {
      void* pointer = nullptr;
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      CUresult rc = v2(name, &pointer, version, 0, &status);
      std::printf("v2|%s|%d|%d|%d|%s\n", name, version, rc, static_cast<int>(status), classify(pointer, name));
      pointer = nullptr;
      rc = legacy(name, &pointer, version, 0);
      std::printf("legacy|%s|%d|%d|-|%s\n", name, version, rc, classify(pointer, name));
    }
  }
  return 0;
}
