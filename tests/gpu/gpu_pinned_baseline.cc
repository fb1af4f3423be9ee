// gpu_pinned_baseline (GPU): the pinned-copy limit the host carrier is compared
// with, measured in the same command as the carrier. Per GPU: cuMemcpyDtoHAsync and
// cuMemcpyHtoDAsync of --bytes (default 4 GiB) between cuMemAlloc memory and
// cuMemHostAlloc'd (pinned) host memory on a stream of its own, timed on the wall clock
// around the copy and cuStreamSynchronize; first each GPU alone, then all GPUs at once (one
// thread each). Also prints how long providing the pinned host memory took (the carrier's
// real cost, DRIVER-FACTS "Speeds"). GB/s are 10^9 bytes per second, best of --reps.
// With --register-threads 1,4,...: how long cuMemHostRegister / cuMemHostUnregister of
// --bytes of touched anonymous memory take when the range is split into that many pieces
// registered by as many threads at once, and the D2H rate of one copy that spans the pieces
// (how the host carrier could register its arena); first, both copies from the same memory
// unregistered (pageable), the alternative to registering at all. Measured on an H200:
// register 0.17 s + copy 0.08 s + unregister 0.08 s for 4 GiB (13.1 GB/s in all) against
// pageable D2H 12.3 GB/s, H2D 6.6 GB/s; more threads do not register faster.
//
// With --overlap: whether registration and unregistration run beside a copy (Overlap).
//
//   gpu_pinned_baseline [--bytes 4G] [--reps 3] [--register-threads 1,4,8] [--overlap]
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu/gpu_check.h"

namespace {

struct Buffers {
  int device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr device_memory = 0;
  void* host = nullptr;
};

enum class Direction { kDeviceToHost, kHostToDevice };
const char* Name(Direction d) { return d == Direction::kDeviceToHost ? "D2H" : "H2D"; }

void Copy(const Buffers& b, Direction direction, size_t bytes) {
  if (direction == Direction::kDeviceToHost) {
    CU(cuMemcpyDtoHAsync(b.host, b.device_memory, bytes, b.stream));
  } else {
    CU(cuMemcpyHtoDAsync(b.device_memory, b.host, bytes, b.stream));
  }
  CU(cuStreamSynchronize(b.stream));
}

Buffers Provide(int device, size_t bytes) {
  Buffers b;
  b.device = device;
  b.context = gpu::UsePrimaryContext(device);
  CU(cuStreamCreate(&b.stream, CU_STREAM_NON_BLOCKING));
  CU(cuMemAlloc(&b.device_memory, bytes));
  CU(cuMemsetD8(b.device_memory, 0x3C, bytes));
  const double start = gpu::NowSeconds();
  CU(cuMemHostAlloc(&b.host, bytes, CU_MEMHOSTALLOC_PORTABLE));
  gpu::Log("BASELINE gpu %d: cuMemHostAlloc of %zu bytes took %.3f s", device, bytes,
           gpu::NowSeconds() - start);
  Copy(b, Direction::kDeviceToHost, bytes);  // warm-up, untimed
  Copy(b, Direction::kHostToDevice, bytes);
  return b;
}

void Free(Buffers& b) {
  CU(cuCtxSetCurrent(b.context));
  CU(cuMemFreeHost(b.host));
  CU(cuMemFree(b.device_memory));
  CU(cuStreamDestroy(b.stream));
}

double GBps(size_t bytes, double seconds) { return static_cast<double>(bytes) / 1e9 / seconds; }

void Alone(const Buffers& b, size_t bytes, int reps) {
  CU(cuCtxSetCurrent(b.context));
  for (Direction direction : {Direction::kDeviceToHost, Direction::kHostToDevice}) {
    double best = 1e30;
    std::string all;
    for (int rep = 0; rep < reps; ++rep) {
      const double start = gpu::NowSeconds();
      Copy(b, direction, bytes);
      const double seconds = gpu::NowSeconds() - start;
      best = std::min(best, seconds);
      char one[32];
      std::snprintf(one, sizeof one, " %.1f", GBps(bytes, seconds));
      all.append(one);
    }
    gpu::Log("BASELINE gpu %d alone %s: %.1f GB/s (best of %d: %.3f s for %zu bytes; each:%s)",
             b.device, Name(direction), GBps(bytes, best), reps, best, bytes, all.c_str());
  }
}

void Together(const std::vector<Buffers>& all, size_t bytes, int reps) {
  for (Direction direction : {Direction::kDeviceToHost, Direction::kHostToDevice}) {
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
      std::barrier start_line(static_cast<std::ptrdiff_t>(all.size()) + 1);
      std::vector<std::thread> threads;
      for (const Buffers& b : all) {
        threads.emplace_back([&start_line, &b, direction, bytes] {
          CU(cuCtxSetCurrent(b.context));
          start_line.arrive_and_wait();
          Copy(b, direction, bytes);
        });
      }
      const double start = gpu::NowSeconds();
      start_line.arrive_and_wait();
      for (std::thread& t : threads) t.join();
      best = std::min(best, gpu::NowSeconds() - start);
    }
    gpu::Log("BASELINE all %zu GPUs at once %s: %.1f GB/s aggregate (best of %d: %.3f s for %zu "
             "bytes per GPU)", all.size(), Name(direction), GBps(bytes * all.size(), best), reps,
             best, bytes);
  }
}

// Runs body(i) on `n` threads started together; returns the wall seconds until all ended.
template <typename Body>
double OnThreads(size_t n, CUcontext context, Body body) {
  std::barrier start_line(static_cast<std::ptrdiff_t>(n) + 1);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      CU(cuCtxSetCurrent(context));
      start_line.arrive_and_wait();
      body(i);
    });
  }
  const double start = gpu::NowSeconds();
  start_line.arrive_and_wait();
  for (std::thread& t : threads) t.join();
  return gpu::NowSeconds() - start;
}

void Registration(const Buffers& b, size_t bytes, const std::vector<size_t>& thread_counts) {
  CU(cuCtxSetCurrent(b.context));
  void* host = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) gpu::Fail("mmap of %zu bytes failed", bytes);
  std::memset(host, 1, bytes);  // touched, as the carrier's arena is
  auto* base = static_cast<unsigned char*>(host);
  // The same memory unregistered (pageable): the driver stages the bytes itself.
  for (Direction direction : {Direction::kDeviceToHost, Direction::kHostToDevice}) {
    Buffers pageable = b;
    pageable.host = host;
    const double start = gpu::NowSeconds();
    Copy(pageable, direction, bytes);
    const double seconds = gpu::NowSeconds() - start;
    gpu::Log("PAGEABLE gpu %d %s: %.1f GB/s (%.3f s for %zu bytes of unregistered memory)", b.device,
             Name(direction), GBps(bytes, seconds), seconds, bytes);
  }
  constexpr size_t kAlign = size_t{2} << 20;
  for (size_t n : thread_counts) {
    const size_t piece = (bytes / n + kAlign - 1) / kAlign * kAlign;
    auto range = [&](size_t i) {
      const size_t at = std::min(bytes, i * piece);
      return std::pair<unsigned char*, size_t>(base + at, std::min(piece, bytes - at));
    };
    const double reg = OnThreads(n, b.context, [&](size_t i) {
      auto [p, len] = range(i);
      if (len) CU(cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE));
    });
    const double start = gpu::NowSeconds();
    Copy(b, Direction::kDeviceToHost, bytes);  // one copy across every piece
    const double copy = gpu::NowSeconds() - start;
    const double unreg = OnThreads(n, b.context, [&](size_t i) {
      auto [p, len] = range(i);
      if (len) CU(cuMemHostUnregister(p));
    });
    gpu::Log("REGISTER gpu %d: %zu bytes in %zu piece(s) on %zu thread(s): register %.3f s "
             "(%.1f GB/s), one D2H copy across the pieces %.1f GB/s, unregister %.3f s (%.1f GB/s)",
             b.device, bytes, n, n, reg, GBps(bytes, reg), GBps(bytes, copy), unreg,
             GBps(bytes, unreg));
  }
  munmap(host, bytes);
}

// Whether host registration runs beside copies (the carrier could then pin ahead of and
// unpin behind its copies on threads of their own): on THP memory of 3 x --bytes, times
// (a) a D2H copy of --bytes into a registered range alone, (b) cuMemHostRegister of a second
// range alone and (c) cuMemHostUnregister of it alone, then (d) the copy again while another
// thread registers the third range, and (e) while another thread unregisters it.
void Overlap(const Buffers& b, size_t bytes) {
  CU(cuCtxSetCurrent(b.context));
  const size_t total = bytes * 3;
  void* host = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) gpu::Fail("mmap of %zu bytes failed", total);
  madvise(host, total, MADV_HUGEPAGE);
  std::memset(host, 1, total);
  auto* copied = static_cast<unsigned char*>(host);
  unsigned char* second = copied + bytes;
  unsigned char* third = second + bytes;
  CU(cuMemHostRegister(copied, bytes, CU_MEMHOSTREGISTER_PORTABLE));
  Buffers target = b;
  target.host = copied;
  auto timed = [](auto body) {
    const double start = gpu::NowSeconds();
    body();
    return gpu::NowSeconds() - start;
  };
  Copy(target, Direction::kDeviceToHost, bytes);  // warm-up
  const double copy_alone = timed([&] { Copy(target, Direction::kDeviceToHost, bytes); });
  const double reg_alone = timed([&] { CU(cuMemHostRegister(second, bytes, CU_MEMHOSTREGISTER_PORTABLE)); });
  const double unreg_alone = timed([&] { CU(cuMemHostUnregister(second)); });
  auto beside = [&](auto side) {
    double side_s = 0;
    double copy_s = 0;
    const double both = OnThreads(2, b.context, [&](size_t i) {
      if (i == 0) {
        copy_s = timed([&] { Copy(target, Direction::kDeviceToHost, bytes); });
      } else {
        side_s = timed(side);
      }
    });
    return std::tuple<double, double, double>(copy_s, side_s, both);
  };
  const auto [copy_r, reg_r, both_r] = beside([&] { CU(cuMemHostRegister(third, bytes, CU_MEMHOSTREGISTER_PORTABLE)); });
  const auto [copy_u, unreg_u, both_u] = beside([&] { CU(cuMemHostUnregister(third)); });
  // The carrier's chunk size: what registering piece by piece costs.
  constexpr size_t kChunk = size_t{64} << 20;
  const double pieces = timed([&] {
    for (size_t at = 0; at + kChunk <= bytes; at += kChunk) {
      CU(cuMemHostRegister(third + at, kChunk, CU_MEMHOSTREGISTER_PORTABLE));
    }
    for (size_t at = 0; at + kChunk <= bytes; at += kChunk) CU(cuMemHostUnregister(third + at));
  });
  gpu::Log("OVERLAP gpu %d: register + unregister in 64 MiB pieces, alone: %.3f s (%.1f GB/s)",
           b.device, pieces, GBps(bytes / kChunk * kChunk, pieces));
  gpu::Log("OVERLAP gpu %d, %zu bytes each: alone copy %.3f s (%.1f GB/s), register %.3f s (%.1f GB/s), "
           "unregister %.3f s (%.1f GB/s); copy beside register: copy %.3f s, register %.3f s, both %.3f s; "
           "copy beside unregister: copy %.3f s, unregister %.3f s, both %.3f s",
           b.device, bytes, copy_alone, GBps(bytes, copy_alone), reg_alone, GBps(bytes, reg_alone),
           unreg_alone, GBps(bytes, unreg_alone), copy_r, reg_r, both_r, copy_u, unreg_u, both_u);
  // Untouched memory: does registration provide the pages as fast as touching does?
  void* fresh = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) gpu::Fail("mmap of %zu bytes failed", bytes);
  madvise(fresh, bytes, MADV_HUGEPAGE);
  auto* untouched = static_cast<unsigned char*>(fresh);
  const double fresh_pieces = timed([&] {
    for (size_t at = 0; at + kChunk <= bytes; at += kChunk) {
      CU(cuMemHostRegister(untouched + at, kChunk, CU_MEMHOSTREGISTER_PORTABLE));
    }
  });
  for (size_t at = 0; at + kChunk <= bytes; at += kChunk) CU(cuMemHostUnregister(untouched + at));
  const double again = timed([&] {
    for (size_t at = 0; at + kChunk <= bytes; at += kChunk) {
      CU(cuMemHostRegister(untouched + at, kChunk, CU_MEMHOSTREGISTER_PORTABLE));
    }
  });
  for (size_t at = 0; at + kChunk <= bytes; at += kChunk) CU(cuMemHostUnregister(untouched + at));
  gpu::Log("OVERLAP gpu %d: register of untouched THP memory in 64 MiB pieces: %.3f s (%.1f GB/s); "
           "the same pieces again, now touched: %.3f s (%.1f GB/s)",
           b.device, fresh_pieces, GBps(bytes / kChunk * kChunk, fresh_pieces), again,
           GBps(bytes / kChunk * kChunk, again));
  munmap(fresh, bytes);
  CU(cuMemHostUnregister(copied));
  munmap(host, total);
}

}  // namespace

int main(int argc, char** argv) {
  gpu::SetRole("baseline");
  size_t bytes = size_t{4} << 30;
  int reps = 3;
  std::vector<size_t> register_threads;
  bool overlap = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bytes" && i + 1 < argc) {
      bytes = gpu::ParseSize(argv[++i]);
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--overlap") {
      overlap = true;
    } else if (arg == "--register-threads" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        register_threads.push_back(static_cast<size_t>(std::max(1, std::atoi(item.c_str()))));
      }
    } else {
      gpu::Fail("usage: gpu_pinned_baseline [--bytes 4G] [--reps 3] [--register-threads 1,4,8] [--overlap] "
                "(unknown argument '%s')", arg.c_str());
    }
  }
  CU(cuInit(0));
  const int count = gpu::DeviceCount();
  gpu::Log("shim %s; %d GPU(s); %zu bytes per copy", gpu::ShimLoaded() ? "loaded" : "not loaded", count, bytes);
  std::vector<Buffers> buffers;
  for (int device = 0; device < count; ++device) buffers.push_back(Provide(device, bytes));
  for (const Buffers& b : buffers) Alone(b, bytes, reps);
  if (count > 1) Together(buffers, bytes, reps);
  if (!register_threads.empty()) Registration(buffers[0], bytes, register_threads);
  if (overlap) Overlap(buffers[0], bytes);
  for (Buffers& b : buffers) Free(b);
  gpu::Log("done");
  return 0;
}
