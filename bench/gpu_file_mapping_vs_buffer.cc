// Moves device memory to files and back two ways, in one run, and prints their rates and
// ratio: through a pinned buffer per thread with pwrite/pread (what a dump's carrier
// streaming does), and by pinning a shared mapping of the file itself so the copy engine
// reads or writes the file's pages (no host copy; tmpfs only, where pages cannot need
// writeback). Decides, by measurement, which a carrier on /dev/shm takes.
//
//   gpu_file_mapping_vs_buffer DIR GIB [THREADS] [UNIT_MIB]
// (built with -DCUSNAP_BUILD_GPU_TESTS=ON by tests/gpu/gpu.cmake; MEASURED.md M27)
#include <cuda.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "%s: %s\n", what, name ? name : "?");
  std::exit(1);
}

struct Job {
  std::string dir;
  size_t bytes = 0;
  unsigned threads = 8;
  size_t unit = 64ull << 20;
  CUcontext context = nullptr;
  CUdeviceptr device = 0;
  size_t Share() const { return bytes / threads; }
  std::string File(unsigned t) const { return dir + "/part-" + std::to_string(t) + ".bin"; }
};

double Run(const Job& job, const std::function<void(unsigned)>& body) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < job.threads; ++t) {
    threads.emplace_back([&, t] {
      Check(cuCtxSetCurrent(job.context), "cuCtxSetCurrent");
      body(t);
    });
  }
  for (auto& t : threads) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void RemoveFiles(const Job& job) {
  for (unsigned t = 0; t < job.threads; ++t) unlink(job.File(t).c_str());
}

// The buffer way: one pinned buffer per thread, the unit copied then written (or read then
// copied).
void Buffered(const Job& job, unsigned t, bool save) {
  void* buffer = nullptr;
  Check(cuMemHostAlloc(&buffer, job.unit, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const int fd = open(job.File(t).c_str(), save ? O_CREAT | O_TRUNC | O_WRONLY : O_RDONLY, 0600);
  const CUdeviceptr base = job.device + t * job.Share();
  for (size_t off = 0; off < job.Share(); off += job.unit) {
    const size_t n = std::min(job.unit, job.Share() - off);
    if (save) {
      Check(cuMemcpyDtoHAsync(buffer, base + off, n, stream), "DtoH");
      Check(cuStreamSynchronize(stream), "sync");
      if (pwrite(fd, buffer, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) std::exit(2);
    } else {
      if (pread(fd, buffer, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) std::exit(2);
      Check(cuMemcpyHtoDAsync(base + off, buffer, n, stream), "HtoD");
      Check(cuStreamSynchronize(stream), "sync");
    }
  }
  close(fd);
  cuStreamDestroy(stream);
  cuMemFreeHost(buffer);
}

// The mapping way: each unit of the file's shared mapping pinned, copied, unpinned.
void Mapped(const Job& job, unsigned t, bool save) {
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const int fd = open(job.File(t).c_str(), save ? O_CREAT | O_TRUNC | O_RDWR : O_RDONLY, 0600);
  if (save && ftruncate(fd, static_cast<off_t>(job.Share())) != 0) std::exit(2);
  void* map = mmap(nullptr, job.Share(), save ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) std::exit(3);
  auto* bytes = static_cast<unsigned char*>(map);
  const CUdeviceptr base = job.device + t * job.Share();
  for (size_t off = 0; off < job.Share(); off += job.unit) {
    const size_t n = std::min(job.unit, job.Share() - off);
    void* host = bytes + off;
    Check(cuMemHostRegister(host, n, save ? 0 : CU_MEMHOSTREGISTER_READ_ONLY), "cuMemHostRegister");
    if (save) {
      Check(cuMemcpyDtoHAsync(host, base + off, n, stream), "DtoH");
    } else {
      Check(cuMemcpyHtoDAsync(base + off, host, n, stream), "HtoD");
    }
    Check(cuStreamSynchronize(stream), "sync");
    Check(cuMemHostUnregister(host), "cuMemHostUnregister");
  }
  munmap(map, job.Share());
  close(fd);
  cuStreamDestroy(stream);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR GIB [THREADS] [UNIT_MIB]\n", argv[0]);
    return 2;
  }
  Job job;
  job.dir = argv[1];
  job.bytes = static_cast<size_t>(std::atof(argv[2]) * (1ull << 30));
  if (argc > 3) job.threads = static_cast<unsigned>(std::atoi(argv[3]));
  if (argc > 4) job.unit = static_cast<size_t>(std::atoi(argv[4])) << 20;
  job.bytes -= job.bytes % (job.threads * job.unit);
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  Check(cuDevicePrimaryCtxRetain(&job.context, dev), "retain");
  Check(cuCtxSetCurrent(job.context), "set");
  Check(cuMemAlloc(&job.device, job.bytes), "cuMemAlloc");
  Check(cuMemsetD32(job.device, 0x5a5a5a5a, job.bytes / 4), "memset");
  Check(cuCtxSynchronize(), "sync");
  const double gb = static_cast<double>(job.bytes) / 1e9;
  struct Way {
    const char* name;
    void (*body)(const Job&, unsigned, bool);
  };
  for (int round = 0; round < 2; ++round) {
    for (Way way : {Way{"buffer", Buffered}, Way{"mapping", Mapped}}) {
      const double save = Run(job, [&](unsigned t) { way.body(job, t, true); });
      const double load = Run(job, [&](unsigned t) { way.body(job, t, false); });
      RemoveFiles(job);
      std::printf("round %d %-8s %.2f GB, %u threads, %zu MiB units: save %.3f s (%.1f GB/s)  load %.3f s (%.1f GB/s)\n",
                  round, way.name, gb, job.threads, job.unit >> 20, save, gb / save, load, gb / load);
      std::fflush(stdout);
    }
  }
  return 0;
}
