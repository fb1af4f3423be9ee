// intercept_bench: the cost the shim adds to an intercepted driver call (DESIGN.md goal:
// under 100 ns per call; the gate alone, on every other entry point, under 5 ns), measured
// on the simulated driver. The same entry point is called through the shim's exported
// wrapper and through the driver's own pointer, in one run, on an allocation the shim does
// not track (the pass-through path every untracked call takes):
//   cuMemGetAccess                           on a mapped 2 MiB range
//   cuMemGetAllocationPropertiesFromHandle   on its allocation handle
// and two entry points the shim only gates (generated wrappers, hooks/gated.cc), whose
// overhead is the gate's open path plus the forwarding:
//   cuCtxGetCurrent, cuStreamQuery           on an idle created stream
// and the difference (ns added per call) and the ratio are printed at the end, in CPU time
// per call (thread CPU time: stable on a loaded shared machine, where wall time is not).
//
// Run it from an optimized build (sanitizers distort every number):
//   cmake --preset release && cmake --build --preset release --target intercept_bench
//   build/release/bin/intercept_bench
// It loads libcusnap.so and the simulated libcuda.so.1 from the build tree (paths compiled
// in); no LD_PRELOAD is needed. Google Benchmark is used when CMake found it, otherwise a
// plain timer loop (best of 5 batches of 2,000,000 calls).
#include <dlfcn.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "shim/driver/cuda_abi.h"

#ifdef CUSNAP_HAVE_BENCHMARK
#include <benchmark/benchmark.h>
#endif

namespace {

using GetAccess = CUresult (*)(unsigned long long*, const CUmemLocation*, CUdeviceptr);
using GetProperties = CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
using CtxGetCurrent = CUresult (*)(CUcontext*);
using StreamQuery = CUresult (*)(CUstream);

struct Subject {
  GetAccess get_access;
  GetProperties get_properties;
  CtxGetCurrent ctx_get_current;
  StreamQuery stream_query;
};

Subject g_driver{}, g_shim{};
CUstream g_stream = nullptr;
CUdeviceptr g_va = 0;
CUmemGenericAllocationHandle g_handle = 0;
CUmemLocation g_location{};

void* open_or_die(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "intercept_bench: dlopen %s: %s\n", path.c_str(), dlerror());
    std::exit(2);
  }
  return handle;
}

template <typename F>
F symbol_or_die(void* library, const char* name) {
  void* found = dlsym(library, name);
  if (found == nullptr) {
    std::fprintf(stderr, "intercept_bench: %s not found\n", name);
    std::exit(2);
  }
  return reinterpret_cast<F>(found);
}

void check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) {
    std::fprintf(stderr, "intercept_bench: %s failed with CUresult %d\n", what, static_cast<int>(rc));
    std::exit(2);
  }
}

// Loads both libraries and maps one untracked 2 MiB allocation (created through the
// driver's own pointers, so the shim never sees it) with read-write access on device 0.
void set_up() {
  void* libcuda = open_or_die(std::string(CUSNAP_BENCH_SIMCUDA_DIR) + "/libcuda.so.1");
  void* shim = open_or_die(CUSNAP_BENCH_SHIM);
  for (auto [subject, library] : {std::pair{&g_driver, libcuda}, std::pair{&g_shim, shim}}) {
    *subject = {symbol_or_die<GetAccess>(library, "cuMemGetAccess"),
                symbol_or_die<GetProperties>(library, "cuMemGetAllocationPropertiesFromHandle"),
                symbol_or_die<CtxGetCurrent>(library, "cuCtxGetCurrent"),
                symbol_or_die<StreamQuery>(library, "cuStreamQuery")};
  }

  check(symbol_or_die<CUresult (*)(unsigned)>(libcuda, "cuInit")(0), "cuInit");
  CUcontext context = nullptr;
  check(symbol_or_die<CUresult (*)(CUcontext*, CUdevice)>(libcuda, "cuDevicePrimaryCtxRetain")(&context, 0),
        "cuDevicePrimaryCtxRetain");
  check(symbol_or_die<CUresult (*)(CUcontext)>(libcuda, "cuCtxSetCurrent")(context), "cuCtxSetCurrent");
  constexpr size_t kSize = size_t{2} << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  check(symbol_or_die<decltype(&cuMemCreate)>(libcuda, "cuMemCreate")(&g_handle, kSize, &prop, 0), "cuMemCreate");
  check(symbol_or_die<decltype(&cuMemAddressReserve)>(libcuda, "cuMemAddressReserve")(&g_va, kSize, 0, 0, 0),
        "cuMemAddressReserve");
  check(symbol_or_die<decltype(&cuMemMap)>(libcuda, "cuMemMap")(g_va, kSize, 0, g_handle, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(symbol_or_die<decltype(&cuMemSetAccess)>(libcuda, "cuMemSetAccess")(g_va, kSize, &access, 1),
        "cuMemSetAccess");
  g_location = prop.location;
  check(symbol_or_die<decltype(&cuStreamCreate)>(libcuda, "cuStreamCreate")(&g_stream, 0), "cuStreamCreate");
  check(g_shim.stream_query(g_stream), "cuStreamQuery through the shim");
  unsigned long long flags = 0;
  check(g_shim.get_access(&flags, &g_location, g_va), "cuMemGetAccess through the shim");
  CUmemAllocationProp got{};
  check(g_shim.get_properties(&got, g_handle), "cuMemGetAllocationPropertiesFromHandle through the shim");
}

inline CUresult call_get_access(const Subject& s) {
  unsigned long long flags = 0;
  return s.get_access(&flags, &g_location, g_va);
}

inline CUresult call_get_properties(const Subject& s) {
  CUmemAllocationProp prop{};
  return s.get_properties(&prop, g_handle);
}

inline CUresult call_ctx_get_current(const Subject& s) {
  CUcontext context = nullptr;
  return s.ctx_get_current(&context);
}

inline CUresult call_stream_query(const Subject& s) { return s.stream_query(g_stream); }

// Every measured entry point, with its call.
struct Measured {
  const char* name;
  CUresult (*call)(const Subject&);
};
constexpr Measured kMeasured[] = {
    {"cuMemGetAccess", &call_get_access},
    {"cuMemGetAllocationPropertiesFromHandle", &call_get_properties},
    {"cuCtxGetCurrent", &call_ctx_get_current},
    {"cuStreamQuery", &call_stream_query},
};

// Prints, per entry point, ns per call both ways, the ns the shim adds and the ratio.
void print_summary(const std::map<std::string, double>& ns_per_call) {
  std::printf("\nCPU ns per call\n%-40s %12s %12s %12s %8s\n", "entry point", "driver ns", "shim ns",
              "added ns", "ratio");
  for (const Measured& measured : kMeasured) {
    const char* name = measured.name;
    auto direct = ns_per_call.find(std::string(name) + "/driver");
    auto shim = ns_per_call.find(std::string(name) + "/shim");
    if (direct == ns_per_call.end() || shim == ns_per_call.end()) continue;
    std::printf("%-40s %12.1f %12.1f %12.1f %8.2f\n", name, direct->second, shim->second,
                shim->second - direct->second, shim->second / direct->second);
  }
}

#ifdef CUSNAP_HAVE_BENCHMARK

void BM_Call(benchmark::State& state, CUresult (*call)(const Subject&), const Subject* subject) {
  for (auto _ : state) benchmark::DoNotOptimize(call(*subject));
}

// Keeps each benchmark's CPU ns per iteration for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> ns_per_call;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      double seconds = run.cpu_accumulated_time / static_cast<double>(run.iterations);
      // With --benchmark_repetitions, the best repetition (least disturbed by other load).
      auto [slot, fresh] = ns_per_call.try_emplace(run.run_name.function_name, seconds * 1e9);
      if (!fresh) slot->second = std::min(slot->second, seconds * 1e9);
    }
  }
};

#else

double thread_cpu_ns() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e9 + static_cast<double>(now.tv_nsec);
}

// Best of 5 batches, CPU ns per call.
template <typename Call>
double time_calls(Call call) {
  constexpr int kBatches = 5;
  constexpr long kCalls = 2'000'000;
  double best = 1e300;
  for (int batch = 0; batch < kBatches; ++batch) {
    double start = thread_cpu_ns();
    for (long i = 0; i < kCalls; ++i) {
      CUresult rc = call();
      asm volatile("" : : "r"(rc) : "memory");
    }
    best = std::min(best, (thread_cpu_ns() - start) / kCalls);
  }
  return best;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  set_up();
#ifdef CUSNAP_HAVE_BENCHMARK
  for (const Measured& measured : kMeasured) {
    benchmark::RegisterBenchmark((std::string(measured.name) + "/driver").c_str(), BM_Call, measured.call, &g_driver);
    benchmark::RegisterBenchmark((std::string(measured.name) + "/shim").c_str(), BM_Call, measured.call, &g_shim);
  }
  benchmark::Initialize(&argc, argv);
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  print_summary(reporter.ns_per_call);
#else
  (void)argc;
  (void)argv;
  std::map<std::string, double> ns_per_call;
  for (const Measured& measured : kMeasured) {
    ns_per_call[std::string(measured.name) + "/driver"] = time_calls([&] { return measured.call(g_driver); });
    ns_per_call[std::string(measured.name) + "/shim"] = time_calls([&] { return measured.call(g_shim); });
  }
  print_summary(ns_per_call);
#endif
  return 0;
}
