// The simulated driver's entry-point resolver (DRIVER-FACTS F10; CUDA Driver API, "Driver
// Entry Point Access"): statuses, versions, per-thread forms, ABI selection, and that every
// exported driver name is reachable through cuGetProcAddress and back.
#include <dlfcn.h>
#include <elf.h>

#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

void *resolve(const char *name, int version, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  void *p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  EXPECT_EQ(cuGetProcAddress_v2(name, &p, version, flags, &status), CUDA_SUCCESS) << name;
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << name;
  return p;
}

// The defined dynamic symbols of an ELF shared object.
std::vector<std::string> exported_symbols(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> names;
  if (file.size() < sizeof(Elf64_Ehdr)) return names;
  auto *eh = reinterpret_cast<const Elf64_Ehdr *>(file.data());
  auto *sh = reinterpret_cast<const Elf64_Shdr *>(file.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const char *strings = file.data() + sh[sh[i].sh_link].sh_offset;
    auto *syms = reinterpret_cast<const Elf64_Sym *>(file.data() + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k)
      if (syms[k].st_shndx != SHN_UNDEF && syms[k].st_name != 0) names.emplace_back(strings + syms[k].st_name);
  }
  return names;
}

std::string driver_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void *>(&cuInit), &info) != 0 ? info.dli_fname : "";
}

TEST(SimcudaResolver, UnknownNameIsSuccessWithSymbolNotFound) {
  void *p = reinterpret_cast<void *>(0x1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  ASSERT_EQ(cuGetProcAddress_v2("cuNoSuchEntryPoint", &p, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(p, nullptr);
  // Versioned ELF names are not api names.
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc_v2", &p, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

TEST(SimcudaResolver, TooOldVersionIsVersionNotSufficient) {
  void *p = reinterpret_cast<void *>(0x1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemCreate", &p, 9000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(p, nullptr);
}

TEST(SimcudaResolver, VersionNewerThanDriverIsInvalidValue) {
  int version = 0;
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13010);  // the default: a CUDA 13.1 driver
  void *p = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", &p, 13020, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p, nullptr);
}

TEST(SimcudaResolver, BadArgumentsAreInvalidValue) {
  void *p = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &p, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", nullptr, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemCreate", &p, 13000, 0x10, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimcudaResolver, PerThreadFlagGivesPtszAndPtdsForms) {
  EXPECT_EQ(resolve("cuMemcpyAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void *>(&cuMemcpyAsync_ptsz));
  EXPECT_EQ(resolve("cuMemcpyAsync", 13000), reinterpret_cast<void *>(&cuMemcpyAsync));
  EXPECT_EQ(resolve("cuMemcpyAsync", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM), reinterpret_cast<void *>(&cuMemcpyAsync));
  EXPECT_EQ(resolve("cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void *>(&cuMemcpyHtoD_v2_ptds));
  // Names without a per-thread form give the default one.
  EXPECT_EQ(resolve("cuMemCreate", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM), reinterpret_cast<void *>(&cuMemCreate));
  // The per-thread resolver defaults to the per-thread forms.
  void *p = nullptr;
  CUdriverProcAddressQueryResult status{};
  ASSERT_EQ(cuGetProcAddress_v2_ptsz("cuStreamSynchronize", &p, 13000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void *>(&cuStreamSynchronize_ptsz));
}

TEST(SimcudaResolver, VersionsSelectTheAbi) {
  EXPECT_EQ(resolve("cuMulticastBindMem", 13010), reinterpret_cast<void *>(&cuMulticastBindMem_v2));
  EXPECT_EQ(resolve("cuMulticastBindMem", 13000), reinterpret_cast<void *>(&cuMulticastBindMem));
  EXPECT_EQ(resolve("cuMulticastBindAddr", 13010), reinterpret_cast<void *>(&cuMulticastBindAddr_v2));
  EXPECT_EQ(resolve("cuMulticastBindAddr", 12010), reinterpret_cast<void *>(&cuMulticastBindAddr));
  EXPECT_EQ(resolve("cuGetProcAddress", 12000), reinterpret_cast<void *>(&cuGetProcAddress_v2));
  EXPECT_EQ(resolve("cuGetProcAddress", 11030), reinterpret_cast<void *>(&cuGetProcAddress));
  EXPECT_EQ(resolve("cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            reinterpret_cast<void *>(&cuGetProcAddress_v2_ptsz));
  EXPECT_EQ(resolve("cuMemGetAddressRange", 3020), reinterpret_cast<void *>(&cuMemGetAddressRange_v2));
  EXPECT_EQ(resolve("cuDeviceGetUuid", 11040), reinterpret_cast<void *>(&cuDeviceGetUuid_v2));
  EXPECT_EQ(resolve("cuDeviceGetUuid", 11000), reinterpret_cast<void *>(&cuDeviceGetUuid));
}

TEST(SimcudaResolver, LegacyResolverReportsNotFound) {
  void *p = reinterpret_cast<void *>(0x1);
  EXPECT_EQ(cuGetProcAddress("cuNoSuchEntryPoint", &p, 11030, 0), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cuGetProcAddress("cuMemCreate", &p, 9000, 0), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuGetProcAddress("cuMemCreate", &p, 11030, 0), CUDA_SUCCESS);
  EXPECT_EQ(p, reinterpret_cast<void *>(&cuMemCreate));
}

TEST(SimcudaResolver, ExportsAreExactlyApiNamesAndTestHooks) {
  std::vector<std::string> names = exported_symbols(driver_path());
  ASSERT_GT(names.size(), 90u);
  for (const std::string &name : names) {
    bool api = name.size() > 2 && name[0] == 'c' && name[1] == 'u' && std::isupper(static_cast<unsigned char>(name[2]));
    EXPECT_TRUE(api || name.rfind("simcuda_test_", 0) == 0) << "unexpected export " << name;
  }
}

// Every exported cu* function is what cuGetProcAddress returns for some api name, version and
// flag: strip the ABI suffixes to get the api name, then search the versions.
TEST(SimcudaResolver, EveryExportedEntryPointIsReachable) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(driver, nullptr);
  const int versions[] = {2000,  2020,  2030,  3020,  4000,  6000,  6050,  7000,  9020,  10000, 10010,
                          10020, 11000, 11030, 11040, 11060, 12000, 12010, 12030, 12050, 12080, 13000, 13010};
  for (const std::string &name : exported_symbols(driver_path())) {
    if (name.rfind("simcuda_test_", 0) == 0) continue;
    void *exported = dlsym(driver, name.c_str());
    ASSERT_NE(exported, nullptr) << name;
    std::string api = name;
    for (const char *suffix : {"_ptds", "_ptsz", "_v2", "_v3", "_v4"})
      if (api.size() > std::strlen(suffix) && api.compare(api.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
        api.erase(api.size() - std::strlen(suffix));
    for (const char *suffix : {"_v2", "_v3", "_v4"})  // cuMemcpyHtoD_v2_ptds -> cuMemcpyHtoD
      if (api.size() > std::strlen(suffix) && api.compare(api.size() - std::strlen(suffix), std::string::npos, suffix) == 0)
        api.erase(api.size() - std::strlen(suffix));
    bool found = false;
    for (int version : versions) {
      for (cuuint64_t flags : {cuuint64_t{0}, cuuint64_t{CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}}) {
        void *p = nullptr;
        CUdriverProcAddressQueryResult status{};
        if (cuGetProcAddress_v2(api.c_str(), &p, version, flags, &status) == CUDA_SUCCESS && p == exported) found = true;
      }
    }
    EXPECT_TRUE(found) << name << " is not reachable as " << api;
  }
}

}  // namespace
