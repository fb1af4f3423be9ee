// gate_probe: run with the shim preloaded (interception_test.cc, GateHoldsEveryEntryPoint).
// Checks that no driver entry point the shim generates a wrapper for bypasses its gate:
//   1. for every row of gated_entry_points.def, dlsym(RTLD_DEFAULT) gives the shim's wrapper;
//   2. with the process quiesced through its own endpoint (the gate closed), a call of every
//      wrapper, each on a thread of its own, waits: none returns while the gate is closed;
//      calls the simulated driver implements are made with real arguments (an async memset
//      and a launch on a created stream, synchronisations, a copy), the others with none
//      (their wrapper answers CUDA_ERROR_NOT_FOUND without reading an argument, the driver
//      lacking them);
//   3. after kResume every call returns: CUDA_SUCCESS for the real ones (and the memset and
//      the launch wrote their words), CUDA_ERROR_NOT_FOUND for the others.
// Prints "gated <rows> waited <calls> returned-early 0 ok" and exits 0, or "bad ..." and 1.
//
// `gate_probe drain`: the drain before save (lifecycle/drain.h) refuses kQuiesce, reopening
// the gate, while a stream capture is open and while a kernel never finishes (wait_u32 on a
// word nobody writes), and quiesces once the work is done. Prints each refusal
// ("refused: <message>") and "drain ok".
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "common/endpoint_client.h"
#include "common/messages.h"
#include "shim/driver/cuda_abi.h"

namespace {

struct Row {
  const char* symbol;
};
constexpr Row kRows[] = {
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) {#symbol},
#include "shim/driver/gated_entry_points.def"
};

[[noreturn]] void Fail(const std::string& why) {
  std::printf("bad %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

void Check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) Fail(std::string(what) + " = " + std::to_string(static_cast<int>(rc)));
}

cusnap::Result<cusnap::proto::StepReply> Step(cusnap::proto::Op op, uint64_t drain_ms = 5'000) {
  return cusnap::Request<cusnap::proto::StepReply>(cusnap::EndpointPath(cusnap::ControlDir(), getpid()),
                                                   cusnap::proto::StepRequest{op, drain_ms, ""}.Encode(), 30'000, op);
}

// kQuiesce must be refused; prints why.
void ExpectRefused(uint64_t drain_ms) {
  auto quiesced = Step(cusnap::proto::Op::kQuiesce, drain_ms);
  if (quiesced.ok()) Fail("quiesce was not refused");
  std::printf("refused: %s\n", quiesced.error().message.c_str());
}

int Drain(CUdeviceptr words, CUstream stream, CUmodule module) {
  Check(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  ExpectRefused(5'000);
  CUgraph graph = nullptr;
  Check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");  // the gate is open again
  CUfunction wait = nullptr;
  Check(cuModuleGetFunction(&wait, module, "wait_u32"), "cuModuleGetFunction");
  CUdeviceptr word = words;
  unsigned value = 1;
  void* params[] = {&word, &value};
  Check(cuLaunchKernel(wait, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
  ExpectRefused(300);
  Check(cuMemsetD32_v2(words, 1, 1), "cuMemsetD32");  // the peer's write: the kernel ends
  Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  auto quiesced = Step(cusnap::proto::Op::kQuiesce);
  if (!quiesced.ok()) Fail("quiesce after the work finished: " + quiesced.error().message);
  auto resumed = Step(cusnap::proto::Op::kResume);
  if (!resumed.ok()) Fail("resume: " + resumed.error().message);
  std::printf("drain ok\n");
  return 0;
}

template <typename Fn>
Fn Wrapper(const char* symbol) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, symbol));
}

}  // namespace

int main(int argc, char** argv) {
  const char* shim_path = std::getenv("CUSNAP_TEST_SHIM");
  void* shim = shim_path != nullptr ? dlopen(shim_path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (shim == nullptr || libcuda == nullptr) Fail("the shim is not preloaded or libcuda is not loaded");

  // 1. Every generated row resolves to the shim's wrapper in the global scope.
  for (const Row& row : kRows) {
    void* found = dlsym(RTLD_DEFAULT, row.symbol);
    if (found == nullptr || found != dlsym(shim, row.symbol)) Fail(std::string(row.symbol) + " is not the shim's");
  }

  CUcontext context = nullptr;
  Check(cuInit(0), "cuInit");
  Check(cuDevicePrimaryCtxRetain(&context, 0), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUdeviceptr words = 0;
  CUstream stream = nullptr;
  CUmodule module = nullptr;
  CUfunction fill = nullptr;
  Check(cuMemAlloc_v2(&words, 4096), "cuMemAlloc");
  Check(cuMemsetD32_v2(words, 0, 1024), "cuMemsetD32");
  Check(cuStreamCreate(&stream, 0), "cuStreamCreate");
  Check(cuModuleLoadData(&module, "simcuda:builtin"), "cuModuleLoadData");
  Check(cuModuleGetFunction(&fill, module, "fill_u32"), "cuModuleGetFunction");
  if (argc > 1 && std::string(argv[1]) == "drain") return Drain(words, stream, module);

  // Threads with real arguments make their context current now, then wait for the gate to close.
  CUresult memset_rc = CUDA_ERROR_UNKNOWN, launch_rc = CUDA_ERROR_UNKNOWN, sync_rc = CUDA_ERROR_UNKNOWN,
           ctx_rc = CUDA_ERROR_UNKNOWN, copy_rc = CUDA_ERROR_UNKNOWN;
  uint32_t copied = 0;
  CUdeviceptr launch_dst = words + 2048;
  unsigned launch_value = 9;
  size_t launch_count = 512;
  void* launch_params[] = {&launch_dst, &launch_value, &launch_count};
  const std::vector<std::function<CUresult()>> real_calls = {
      [&] { return memset_rc = Wrapper<decltype(&cuMemsetD32Async)>("cuMemsetD32Async")(words, 7, 512, stream); },
      [&] {
        return launch_rc = Wrapper<decltype(&cuLaunchKernel)>("cuLaunchKernel")(fill, 1, 1, 1, 1, 1, 1, 0, stream,
                                                                                  launch_params, nullptr);
      },
      [&] { return sync_rc = Wrapper<decltype(&cuStreamSynchronize)>("cuStreamSynchronize")(stream); },
      [&] { return ctx_rc = Wrapper<decltype(&cuCtxSynchronize)>("cuCtxSynchronize")(); },
      [&] { return copy_rc = Wrapper<decltype(&cuMemcpyDtoH_v2)>("cuMemcpyDtoH_v2")(&copied, words, sizeof copied); },
  };
  std::atomic<int> returned{0};
  std::latch ready(static_cast<std::ptrdiff_t>(real_calls.size()));
  std::latch closed(1);
  std::vector<std::thread> calls;
  for (const auto& real_call : real_calls) {
    calls.emplace_back([&, real_call] {
      Check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
      ready.count_down();
      closed.wait();
      real_call();
      returned.fetch_add(1);
    });
  }
  ready.wait();

  // 2. The gate closed, one call per wrapper, each on its own thread.
  auto quiesced = Step(cusnap::proto::Op::kQuiesce);
  if (!quiesced.ok()) Fail("quiesce: " + quiesced.error().message);
  closed.count_down();
  // Hundreds of threads at once: small stacks (pthreads; std::thread cannot set the size).
  struct HeldCall {
    CUresult (*call)();
    CUresult result;
    std::atomic<int>* returned;
    pthread_t thread;
  };
  std::vector<HeldCall> held;
  held.reserve(std::size(kRows));
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 << 10);
  for (const Row& row : kRows) {
    if (dlsym(libcuda, row.symbol) != nullptr) continue;  // implemented: real arguments above
    held.push_back({Wrapper<CUresult (*)()>(row.symbol), CUDA_ERROR_UNKNOWN, &returned, {}});
    auto body = [](void* arg) -> void* {
      auto* h = static_cast<HeldCall*>(arg);
      h->result = h->call();
      h->returned->fetch_add(1);
      return nullptr;
    };
    if (pthread_create(&held.back().thread, &attr, body, &held.back()) != 0) Fail("pthread_create");
  }
  pthread_attr_destroy(&attr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int early = returned.load();
  // Simulated device memory is host memory of this process: the held memset has not run.
  const uint32_t before = *reinterpret_cast<volatile const uint32_t*>(words);
  auto resumed = Step(cusnap::proto::Op::kResume);
  if (!resumed.ok()) Fail("resume: " + resumed.error().message);
  for (std::thread& t : calls) t.join();
  for (HeldCall& h : held) pthread_join(h.thread, nullptr);
  if (early != 0) Fail(std::to_string(early) + " call(s) returned while the gate was closed");
  if (before != 0) Fail("a held memset reached the driver");
  for (const HeldCall& h : held) {
    if (h.result != CUDA_ERROR_NOT_FOUND) Fail("a wrapper without a driver function returned " + std::to_string(h.result));
  }
  Check(memset_rc, "cuMemsetD32Async");
  Check(launch_rc, "cuLaunchKernel");
  Check(sync_rc, "cuStreamSynchronize");
  Check(ctx_rc, "cuCtxSynchronize");
  Check(copy_rc, "cuMemcpyDtoH");
  Check(cuStreamSynchronize(stream), "cuStreamSynchronize");
  uint32_t host[1024] = {};
  Check(cuMemcpyDtoH_v2(host, words, sizeof host), "cuMemcpyDtoH");
  if (host[0] != 7 || host[511] != 7 || host[512] != 9 || host[1023] != 9) Fail("the held calls did not write");
  std::printf("gated %zu waited %zu returned-early %d ok\n", std::size(kRows), calls.size() + held.size(), early);
  return 0;
}
