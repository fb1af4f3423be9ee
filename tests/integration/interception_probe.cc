// interception_probe: looks every intercepted entry point up through every path a program
// can take to the driver or the runtime, and prints one line per lookup:
//
//   <path>|<name>|<version>|<flags>|<rc>|<status>|<pointer>
//
// <pointer> is "null", "shim:<symbol>" when it is the wrapper dlsym(shim handle, <symbol>)
// gives, or "<library basename>:<exported name>[+0x<offset>]" (dladdr) otherwise; "-" marks
// a field a path does not have. Run once without the shim and once with it preloaded, the
// two outputs are compared by interception_test.cc. Paths: direct linking ("direct"), dlsym
// on a libcuda and a libcudart handle, RTLD_DEFAULT, RTLD_NEXT, cuGetProcAddress legacy /
// _v2 / _v2_ptsz and the runtime's cudaGetDriverEntryPoint[ByVersion][_ptsz], each name at
// each version with the default, legacy-stream and per-thread-stream flags. The lists of names come from
// entry_points.def and the generated gated_entry_points.def (every other driver entry point
// cuda.h declares; X-macros), plus names the shim must leave alone. The generated rows are
// not linked directly (the simulated driver implements only some of them): they are walked
// through every other path.
//
// Usage: interception_probe walk     the table walk above
//        interception_probe scope    RTLD_NEXT caller scope and same-named symbols of a
//                                    non-CUDA library (needs interception_interposer loaded)
//        interception_probe race     8 threads make the process's first driver lookups at once
//                                    (the real tables are resolved lock-free; losers of the
//                                    publication race free their copies)
// Status fields start at 3, a value no resolver writes, so an unwritten status shows.
// Environment: CUSNAP_TEST_SHIM (path of libcusnap.so; "shim:" names need it loaded).
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "shim/driver/cuda_abi.h"

// The table's exported names, linked directly (libcuda.so.1 and libcudart.so.13 of the
// simulated driver, or the shim's wrappers when it is preloaded).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) CUresult symbol params;
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) cudaError_t symbol params;
#include "shim/driver/entry_points.def"
}

namespace {

struct Row {
  const char* symbol;
  const char* api_name;
  bool runtime;
  void* direct;  // the address the direct link gives; nullptr for generated rows
};

const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, false, reinterpret_cast<void*>(&::symbol)},
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, true, reinterpret_cast<void*>(&::symbol)},
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, false, nullptr},
#include "shim/driver/gated_entry_points.def"
  };
  return kRows;
}

// Every driver name cuda.h declares is in the tables; a name that does not exist must come
// back exactly as the driver answers, and the runtime's own functions stay the runtime's.
constexpr const char* kOtherDriverNames[] = {"cuNoSuchEntryPoint"};
constexpr const char* kOtherRuntimeSymbols[] = {"cudaRuntimeGetVersion", "cudaGetDeviceCount"};
// 2000-10010: the oldest ABIs of context and stream-capture entry points (cuCtxCreate,
// cuStreamBeginCapture), which newer versions no longer return.
constexpr int kVersions[] = {2000, 3020, 4000, 10000, 10010, 11000, 11030, 12000, 13000, 13010};

void* g_shim = nullptr;

std::string describe(const void* pointer) {
  if (pointer == nullptr) return "null";
  Dl_info info{};
  if (dladdr(pointer, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  // A wrapper is exported under its row's name: the shim's dlsym of that name must give it.
  if (g_shim != nullptr && info.dli_sname != nullptr && info.dli_saddr == pointer &&
      dlsym(g_shim, info.dli_sname) == pointer) {
    return std::string("shim:") + info.dli_sname;
  }
  const char* slash = std::strrchr(info.dli_fname, '/');
  std::string text = slash != nullptr ? slash + 1 : info.dli_fname;
  text += ':';
  text += info.dli_sname != nullptr ? info.dli_sname : "?";
  auto offset = static_cast<const char*>(pointer) - static_cast<const char*>(info.dli_saddr);
  if (info.dli_sname == nullptr || offset != 0) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "+0x%tx", offset);
    text += buffer;
  }
  return text;
}

void line(const char* path, const char* name, const std::string& version, const std::string& flags,
          const std::string& rc, const std::string& status, const void* pointer) {
  std::printf("%s|%s|%s|%s|%s|%s|%s\n", path, name, version.c_str(), flags.c_str(), rc.c_str(),
              status.c_str(), describe(pointer).c_str());
}

std::vector<std::string> unique_driver_api_names() {
  std::vector<std::string> names;
  for (const Row& row : rows()) {
    bool seen = false;
    for (const std::string& n : names) seen = seen || n == row.api_name;
    if (!row.runtime && !seen) names.emplace_back(row.api_name);
  }
  for (const char* other : kOtherDriverNames) names.emplace_back(other);
  return names;
}

void* open_or_die(const char* soname) {
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "interception_probe: dlopen %s: %s\n", soname, dlerror());
    std::exit(2);
  }
  return handle;
}

void walk_symbols() {
  void* libcuda = open_or_die("libcuda.so.1");
  void* libcudart = open_or_die("libcudart.so.13");
  for (const Row& row : rows()) {
    if (row.direct != nullptr) line("direct", row.symbol, "-", "-", "-", "-", row.direct);
    line(row.runtime ? "dlsym-libcudart" : "dlsym-libcuda", row.symbol, "-", "-", "-", "-",
         dlsym(row.runtime ? libcudart : libcuda, row.symbol));
    line("rtld-default", row.symbol, "-", "-", "-", "-", dlsym(RTLD_DEFAULT, row.symbol));
    line("rtld-next", row.symbol, "-", "-", "-", "-", dlsym(RTLD_NEXT, row.symbol));
  }
  for (const char* symbol : kOtherRuntimeSymbols) {
    line("dlsym-libcudart", symbol, "-", "-", "-", "-", dlsym(libcudart, symbol));
  }
}

void walk_driver_resolvers() {
  const cuuint64_t kFlags[] = {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  for (const std::string& name : unique_driver_api_names()) {
    std::vector<int> versions(std::begin(kVersions), std::end(kVersions));
    versions.push_back(9000);  // older than every VMM entry point: VERSION_NOT_SUFFICIENT
    for (int version : versions) {
      for (cuuint64_t flags : kFlags) {
        std::string v = std::to_string(version), f = std::to_string(flags);
        void* pointer = nullptr;
        CUresult rc = ::cuGetProcAddress(name.c_str(), &pointer, version, flags);
        line("cuGetProcAddress", name.c_str(), v, f, std::to_string(rc), "-", pointer);
        for (bool ptsz : {false, true}) {
          pointer = nullptr;
          auto status = static_cast<CUdriverProcAddressQueryResult>(3);
          rc = ptsz ? ::cuGetProcAddress_v2_ptsz(name.c_str(), &pointer, version, flags, &status)
                    : ::cuGetProcAddress_v2(name.c_str(), &pointer, version, flags, &status);
          line(ptsz ? "cuGetProcAddress_v2_ptsz" : "cuGetProcAddress_v2", name.c_str(), v, f,
               std::to_string(rc), std::to_string(static_cast<int>(status)), pointer);
        }
      }
    }
  }
}

void walk_runtime_resolvers() {
  const unsigned long long kFlags[] = {cudaEnableDefault, cudaEnableLegacyStream,
                                       cudaEnablePerThreadDefaultStream};
  for (const std::string& name : unique_driver_api_names()) {
    for (unsigned long long flags : kFlags) {
      std::string f = std::to_string(flags);
      for (bool ptsz : {false, true}) {
        void* pointer = nullptr;
        auto status = static_cast<cudaDriverEntryPointQueryResult>(3);
        cudaError_t rc = ptsz ? ::cudaGetDriverEntryPoint_ptsz(name.c_str(), &pointer, flags, &status)
                              : ::cudaGetDriverEntryPoint(name.c_str(), &pointer, flags, &status);
        line(ptsz ? "cudaGetDriverEntryPoint_ptsz" : "cudaGetDriverEntryPoint", name.c_str(), "-", f,
             std::to_string(rc), std::to_string(static_cast<int>(status)), pointer);
        for (int version : kVersions) {
          pointer = nullptr;
          status = static_cast<cudaDriverEntryPointQueryResult>(3);
          auto v = static_cast<unsigned>(version);
          rc = ptsz ? ::cudaGetDriverEntryPointByVersion_ptsz(name.c_str(), &pointer, v, flags, &status)
                    : ::cudaGetDriverEntryPointByVersion(name.c_str(), &pointer, v, flags, &status);
          line(ptsz ? "cudaGetDriverEntryPointByVersion_ptsz" : "cudaGetDriverEntryPointByVersion",
               name.c_str(), std::to_string(version), f, std::to_string(rc),
               std::to_string(static_cast<int>(status)), pointer);
        }
      }
    }
  }
}

// With interception_interposer preloaded after the shim: its RTLD_NEXT lookups must search
// after *it* (landing in libcuda, never in itself), and its own cuMemGetAccess, a same-named
// symbol of a non-CUDA library, must never be replaced.
void scope() {
  using NextFunction = void* (*)(const char*);
  auto next = reinterpret_cast<NextFunction>(dlsym(RTLD_DEFAULT, "interposer_next"));
  if (next == nullptr) {
    std::fprintf(stderr, "interception_probe: interception_interposer is not loaded\n");
    std::exit(2);
  }
  void* interposer = dlopen("libinterception_interposer.so", RTLD_NOW | RTLD_NOLOAD);
  line("interposer-next", "cuMemGetAccess", "-", "-", "-", "-", next("cuMemGetAccess"));
  line("interposer-next", "interposer_next", "-", "-", "-", "-", next("interposer_next"));
  line("dlsym-interposer", "cuMemGetAccess", "-", "-", "-", "-",
       interposer != nullptr ? dlsym(interposer, "cuMemGetAccess") : nullptr);
  line("rtld-default", "cuMemGetAccess", "-", "-", "-", "-", dlsym(RTLD_DEFAULT, "cuMemGetAccess"));
  line("rtld-next", "cuMemGetAccess", "-", "-", "-", "-", dlsym(RTLD_NEXT, "cuMemGetAccess"));
}

// Eight threads released together each resolve every driver api name of the table as the
// process's first use of the driver; each prints what it got, thread by thread.
void race() {
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::vector<std::vector<std::string>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &start, &seen] {
      start.arrive_and_wait();
      for (const Row& row : rows()) {
        if (row.runtime || row.direct == nullptr) continue;
        void* pointer = nullptr;
        CUdriverProcAddressQueryResult status{};
        ::cuGetProcAddress_v2(row.api_name, &pointer, 13010, 0, &status);
        seen[t].push_back(std::string(row.api_name) + "|" + describe(pointer));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (const std::string& answer : seen[t]) {
      std::printf("race-%d|%s|-|-|-|-|%s\n", t, answer.substr(0, answer.find('|')).c_str(),
                  answer.substr(answer.find('|') + 1).c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* shim_path = std::getenv("CUSNAP_TEST_SHIM");
  if (shim_path != nullptr) g_shim = dlopen(shim_path, RTLD_NOW | RTLD_NOLOAD);
  std::string mode = argc > 1 ? argv[1] : "walk";
  if (g_shim != nullptr) {
    using BuildInfo = const char* (*)();
    auto info = reinterpret_cast<BuildInfo>(dlsym(g_shim, "cusnap_build_info"));
    std::printf("build-info|%s\n", info != nullptr ? info() : "missing");
  }
  if (mode == "walk") {
    walk_symbols();
    walk_driver_resolvers();
    walk_runtime_resolvers();
  } else if (mode == "scope") {
    scope();
  } else if (mode == "race") {
    race();
  } else {
    std::fprintf(stderr, "usage: interception_probe walk|scope|race\n");
    return 2;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
