// The in-flight workload (job_workload.h). Iteration i of the part this process owns:
//   s1: cuMemsetD32Async(part, 2i)  then  add_u32(part, +1), launched on even iterations and
//       replayed from a graph captured at the start (cuGraphLaunch) on odd ones -> every word 2i+1
//   s1: event; s2 waits for it, then copies the part's first page (cuMemcpyDtoDAsync) to a
//       private cuMemAlloc buffer and, through cuLaunchKernelEx, copy_u32 the next page
//   s2 synchronised: the private buffer holds 2i+1 (read back with cuMemcpyDtoHAsync)
//   s1 synchronised: the whole part holds 2i+1 (cuMemcpyDtoH)
//   the other parts: each word at least what it was at the last look (another process only
//   ever raises its words), i.e. no write of the peer that returned success was lost.
// A word that is not what it must be counts as a lost write; a call that does not return
// CUDA_SUCCESS counts as an error (the first one is remembered by name).
#include "job_workload.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace jobworker {
namespace {

constexpr size_t kPageWords = 1024;

struct Workload {
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> iterations{0}, errors{0}, lost{0};
  std::mutex mutex;
  std::string first_error = "-";  // guarded by mutex
  std::string first_lost = "-";   // guarded by mutex
};

Workload* g_workload = nullptr;

// Counts a failed call; true when it succeeded.
bool Ok(Workload& w, CUresult rc, const char* call) {
  if (rc == CUDA_SUCCESS) return true;
  w.errors.fetch_add(1);
  std::lock_guard lock(w.mutex);
  // The entry point's name only (one word in the reply): "cuMemsetD32Async=1".
  const std::string text(call);
  if (w.first_error == "-") w.first_error = text.substr(0, text.find('(')) + "=" + std::to_string(static_cast<int>(rc));
  return false;
}

#define WL(call) Ok(w, (call), #call)

// Names the first word not as it must be, once (one word in the reply):
// "<where>@<word index>=<read>/<due>,iteration=<i>" (due: the value written, or for a peer's
// word the least it may be).
void Lost(Workload& w, const char* where, size_t index, uint32_t read, uint32_t due, uint32_t iteration) {
  std::lock_guard lock(w.mutex);
  if (w.first_lost != "-") return;
  w.first_lost = std::string(where) + "@" + std::to_string(index) + "=" + std::to_string(read) + "/" +
                 std::to_string(due) + ",iteration=" + std::to_string(iteration);
}

void Run(Workload& w, CUcontext context, CUdeviceptr va, size_t size, int part, int parts) {
  const size_t part_words = size / sizeof(uint32_t) / static_cast<size_t>(parts);
  const CUdeviceptr mine = va + static_cast<size_t>(part) * part_words * sizeof(uint32_t);
  CUstream s1 = nullptr, s2 = nullptr;
  CUevent written = nullptr;
  CUmodule module = nullptr;
  CUfunction add = nullptr, copy = nullptr;
  CUdeviceptr scratch = 0;
  if (!WL(cuCtxSetCurrent(context)) || !WL(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
      !WL(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)) || !WL(cuEventCreate(&written, 0)) ||
      !WL(cuModuleLoadData(&module, "simcuda:builtin")) || !WL(cuModuleGetFunction(&add, module, "add_u32")) ||
      !WL(cuModuleGetFunction(&copy, module, "copy_u32")) ||
      !WL(cuMemAlloc(&scratch, 2 * kPageWords * sizeof(uint32_t)))) {
    return;
  }
  // The graph: add_u32(part, +1), captured once (no capture stays open across a checkpoint).
  unsigned one = 1;
  size_t count = part_words;
  CUdeviceptr target = mine;
  void* add_params[] = {&target, &one, &count};
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  if (!WL(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL)) ||
      !WL(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, s1, add_params, nullptr)) ||
      !WL(cuStreamEndCapture(s1, &graph)) || !WL(cuGraphInstantiate(&exec, graph, 0))) {
    return;
  }
  std::vector<uint32_t> host(part_words), page(2 * kPageWords);
  std::vector<uint32_t> seen(size / sizeof(uint32_t), 0);  // the other parts, at the last look
  for (uint32_t i = 1; !w.stop.load(); ++i) {
    const uint32_t expected = 2 * i + 1;
    WL(cuMemsetD32Async(mine, 2 * i, part_words, s1));
    if (i % 2 == 0) {
      WL(cuLaunchKernel(add, 1, 1, 1, 256, 1, 1, 0, s1, add_params, nullptr));
    } else {
      WL(cuGraphLaunch(exec, s1));
    }
    WL(cuEventRecord(written, s1));
    WL(cuStreamWaitEvent(s2, written, 0));
    WL(cuMemcpyDtoDAsync(scratch, mine, kPageWords * sizeof(uint32_t), s2));
    CUdeviceptr to = scratch + kPageWords * sizeof(uint32_t), from = mine + kPageWords * sizeof(uint32_t);
    size_t page_words = kPageWords;
    void* copy_params[] = {&to, &from, &page_words};
    CUlaunchConfig config{};
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 256;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = s2;
    WL(cuLaunchKernelEx(&config, copy, copy_params, nullptr));
    WL(cuMemcpyDtoHAsync(page.data(), scratch, page.size() * sizeof(uint32_t), s2));
    WL(cuStreamSynchronize(s2));
    WL(cuStreamSynchronize(s1));
    WL(cuMemcpyDtoH(host.data(), mine, part_words * sizeof(uint32_t)));
    uint64_t bad = 0;
    for (size_t k = 0; k < page.size(); ++k) {
      if (page[k] == expected) continue;
      ++bad;
      Lost(w, k < kPageWords ? "copied-page" : "kernel-copied-page", k, page[k], expected, i);
    }
    for (size_t k = 0; k < host.size(); ++k) {
      if (host[k] == expected) continue;
      ++bad;
      Lost(w, "own", k, host[k], expected, i);
    }
    for (int other = 0; other < parts; ++other) {
      if (other == part) continue;
      const size_t first = static_cast<size_t>(other) * part_words;
      WL(cuMemcpyDtoH(host.data(), va + first * sizeof(uint32_t), part_words * sizeof(uint32_t)));
      for (size_t k = 0; k < part_words; ++k) {
        if (host[k] < seen[first + k]) {
          ++bad;
          Lost(w, "peer", first + k, host[k], seen[first + k], i);
        }
        seen[first + k] = host[k];
      }
    }
    w.lost.fetch_add(bad);
    w.iterations.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  WL(cuGraphExecDestroy(exec));
  WL(cuGraphDestroy(graph));
  WL(cuStreamDestroy(s1));
  WL(cuStreamDestroy(s2));
  WL(cuEventDestroy(written));
  WL(cuMemFree(scratch));
  WL(cuModuleUnload(module));
}

}  // namespace

std::string StartWorkload(CUcontext context, CUdeviceptr va, size_t size, int part, int parts) {
  if (g_workload != nullptr) return "bad a workload runs already";
  if (parts < 1 || part < 0 || part >= parts || size % (static_cast<size_t>(parts) * 4 * 2 * kPageWords) != 0) {
    return "bad workload part " + std::to_string(part) + " of " + std::to_string(parts);
  }
  g_workload = new Workload;
  g_workload->thread = std::thread(Run, std::ref(*g_workload), context, va, size, part, parts);
  return "ok";
}

std::string WorkloadCounts() {
  if (g_workload == nullptr) return "bad no workload";
  Workload& w = *g_workload;
  std::lock_guard lock(w.mutex);
  return "ok " + std::to_string(w.iterations.load()) + " " + std::to_string(w.errors.load()) + " " +
         std::to_string(w.lost.load()) + " " + w.first_error + " " + w.first_lost;
}

std::string StopWorkload() {
  if (g_workload == nullptr) return "bad no workload";
  g_workload->stop.store(true);
  g_workload->thread.join();
  std::string counts = WorkloadCounts();
  delete g_workload;
  g_workload = nullptr;
  return counts;
}

}  // namespace jobworker
