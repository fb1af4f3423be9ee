// cusnap-demo-worker: one process of `cusnap demo`'s job, an ordinary CUDA driver API program
// started through `cusnap run` (so the shim is preloaded and the chosen driver is found).
// The creator makes three POSIX-capable device allocations on its device, maps them, fills
// them with the known pattern and sends tickets to the importer, which imports and maps them
// on its own device. Both then answer the demo on the control socket (demo_protocol.h).
//
//   cusnap-demo-worker creator|importer <device> <bytes> <bytes> <bytes>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cuda.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "demo/demo_job.h"
#include "demo/demo_protocol.h"
#include "common/socket.h"
#include "common/text.h"

namespace {

using cusnap::Result;
using cusnap::Status;
using cusnap::cli::demo::kAllocations;
using cusnap::cli::demo::kAnswerTimeoutMs;
using cusnap::cli::demo::PatternWord;

/// Host staging buffer per copy: bounded, whatever the allocation size.
constexpr size_t kChunkBytes = size_t{64} << 20;

struct Allocation {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
};

struct Worker {
  bool creator = false;
  int device = 0;
  Allocation allocations[kAllocations];
  std::string failure;  ///< the first failure, for the "fail" reply
};

bool Cu(Worker& w, CUresult rc, const char* call, size_t allocation = kAllocations) {
  if (rc == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = nullptr;
  w.failure = std::string(call) + " failed: " + cusnap::CuResultText(rc, name);
  if (allocation < kAllocations) w.failure = "allocation " + std::to_string(allocation) + ": " + w.failure;
  return false;
}

void Reply(const std::string& line) {
  const std::string text = line + "\n";
  // The demo reads one line per request; a short write on a stream socket is retried.
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::send(cusnap::cli::demo::kControlFd, text.data() + done, text.size() - done,
                             MSG_NOSIGNAL);
    if (n <= 0) std::_Exit(3);  // the demo is gone: nothing left to answer
    done += static_cast<size_t>(n);
  }
}

bool MapOnOwnDevice(Worker& w, size_t k) {
  Allocation& a = w.allocations[k];
  if (!Cu(w, cuMemAddressReserve(&a.va, a.size, 0, 0, 0), "cuMemAddressReserve", k)) return false;
  if (!Cu(w, cuMemMap(a.va, a.size, 0, a.handle, 0), "cuMemMap", k)) return false;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = w.device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return Cu(w, cuMemSetAccess(a.va, a.size, &access, 1), "cuMemSetAccess", k);
}

bool Fill(Worker& w, size_t k) {
  const Allocation& a = w.allocations[k];
  std::vector<uint64_t> words(std::min(a.size, kChunkBytes) / sizeof(uint64_t));
  for (size_t at = 0; at < a.size; at += kChunkBytes) {
    const size_t bytes = std::min(kChunkBytes, a.size - at);
    const uint64_t first = at / sizeof(uint64_t);
    for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) words[i] = PatternWord(k, first + i);
    if (!Cu(w, cuMemcpyHtoD(a.va + at, words.data(), bytes), "cuMemcpyHtoD", k)) return false;
  }
  // Complete before the importer reads it (see the write request below).
  return Cu(w, cuCtxSynchronize(), "cuCtxSynchronize", k);
}

/// Every byte of every allocation holds the pattern; the bytes checked, or 0 with w.failure.
uint64_t Check(Worker& w) {
  uint64_t checked = 0;
  std::vector<uint64_t> words(kChunkBytes / sizeof(uint64_t));
  for (size_t k = 0; k < kAllocations; ++k) {
    const Allocation& a = w.allocations[k];
    for (size_t at = 0; at < a.size; at += kChunkBytes) {
      const size_t bytes = std::min(kChunkBytes, a.size - at);
      if (!Cu(w, cuMemcpyDtoH(words.data(), a.va + at, bytes), "cuMemcpyDtoH", k)) return 0;
      const uint64_t first = at / sizeof(uint64_t);
      for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) {
        if (words[i] != PatternWord(k, first + i)) {
          char text[200];
          std::snprintf(text, sizeof text,
                        "allocation %zu (va 0x%llx) byte offset %llu: 0x%016llx, expected 0x%016llx",
                        k, static_cast<unsigned long long>(a.va),
                        static_cast<unsigned long long>((first + i) * sizeof(uint64_t)),
                        static_cast<unsigned long long>(words[i]),
                        static_cast<unsigned long long>(PatternWord(k, first + i)));
          w.failure = text;
          return 0;
        }
      }
      checked += bytes;
    }
  }
  return checked;
}

bool SetUpCreator(Worker& w) {
  int tickets[kAllocations];
  for (size_t k = 0; k < kAllocations; ++k) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = w.device;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    if (!Cu(w, cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity", k)) {
      return false;
    }
    if (w.allocations[k].size % granularity != 0) {
      w.failure = "allocation " + std::to_string(k) + ": " + std::to_string(w.allocations[k].size) +
                  " bytes is not a multiple of the granularity (" + std::to_string(granularity) + ")";
      return false;
    }
    if (!Cu(w, cuMemCreate(&w.allocations[k].handle, w.allocations[k].size, &prop, 0), "cuMemCreate", k) ||
        !MapOnOwnDevice(w, k) || !Fill(w, k) ||
        !Cu(w, cuMemExportToShareableHandle(&tickets[k], w.allocations[k].handle,
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            "cuMemExportToShareableHandle", k)) {
      return false;
    }
  }
  // One packet per ticket (common/socket.h); the importer waits as long as the demo waits for
  // an answer.
  bool sent = true;
  const char byte = 'T';
  for (size_t k = 0; k < kAllocations && sent; ++k) {
    const Status status = cusnap::SendPacket(cusnap::cli::demo::kPeerFd, &byte, 1, tickets[k],
                                             cusnap::Deadline::AfterMs(kAnswerTimeoutMs));
    if (!status.ok()) w.failure = "sending the tickets to the importer: " + status.error().message;
    sent = status.ok();
  }
  for (int fd : tickets) ::close(fd);
  return sent;
}

bool SetUpImporter(Worker& w) {
  int tickets[kAllocations];
  for (size_t k = 0; k < kAllocations; ++k) {
    // A creator that failed closes its end (ECONNRESET).
    char byte = 0;
    const Result<size_t> got = cusnap::RecvPacket(cusnap::cli::demo::kPeerFd, &byte, 1, &tickets[k],
                                                  cusnap::Deadline::AfterMs(kAnswerTimeoutMs));
    if (!got.ok() || tickets[k] < 0) {
      for (size_t i = 0; i < k; ++i) ::close(tickets[i]);
      w.failure = "no tickets from the creator (it failed or exited)";
      if (!got.ok()) w.failure += ": " + got.error().message;
      return false;
    }
  }
  bool ok = true;
  for (size_t k = 0; k < kAllocations; ++k) {
    ok = ok && Cu(w, cuMemImportFromShareableHandle(&w.allocations[k].handle,
                                                    reinterpret_cast<void*>(static_cast<intptr_t>(tickets[k])),
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  "cuMemImportFromShareableHandle", k) &&
         MapOnOwnDevice(w, k);
    ::close(tickets[k]);
  }
  return ok;
}

void Release(Worker& w) {
  for (Allocation& a : w.allocations) {
    if (a.va != 0) {
      cuMemUnmap(a.va, a.size);
      cuMemAddressFree(a.va, a.size);
    }
    if (a.handle != 0) cuMemRelease(a.handle);
    a = Allocation{};
  }
}

/// Answers requests until "exit" or the end of the control socket.
void Serve(Worker& w, FILE* in) {
  char line[256];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    size_t k = 0;
    unsigned long long word = 0, value = 0;
    if (std::strncmp(line, "check", 5) == 0) {
      const uint64_t checked = Check(w);
      Reply(checked ? "ok " + std::to_string(checked) : "bad " + w.failure);
    } else if (std::sscanf(line, "read %zu %llu", &k, &word) == 2 && k < kAllocations &&
               (word + 1) * sizeof(uint64_t) <= w.allocations[k].size) {
      uint64_t got = 0;
      if (Cu(w, cuMemcpyDtoH(&got, w.allocations[k].va + word * sizeof got, sizeof got), "cuMemcpyDtoH", k)) {
        char text[40];
        std::snprintf(text, sizeof text, "ok %llx", static_cast<unsigned long long>(got));
        Reply(text);
      } else {
        Reply("fail " + w.failure);
      }
    } else if (std::sscanf(line, "write %zu %llu %llx", &k, &word, &value) == 3 && k < kAllocations &&
               (word + 1) * sizeof(uint64_t) <= w.allocations[k].size) {
      const uint64_t put = value;
      // A copy from pageable memory may return before its DMA reached the device (CUDA
      // Driver API, "API synchronization behavior"); the other process reads next, so the
      // write is complete before "ok" (on one GPU the reader saw the old word 1 run in 4).
      const bool ok = Cu(w, cuMemcpyHtoD(w.allocations[k].va + word * sizeof put, &put, sizeof put),
                         "cuMemcpyHtoD", k) &&
                      Cu(w, cuCtxSynchronize(), "cuCtxSynchronize", k);
      Reply(ok ? "ok" : "fail " + w.failure);
    } else if (std::strncmp(line, "exit", 4) == 0) {
      Release(w);
      Reply("bye");
      return;
    } else {
      Reply("fail unknown request: " + std::string(line, strcspn(line, "\n")));
    }
  }
}

bool SetUp(Worker& w) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  return Cu(w, cuInit(0), "cuInit") && Cu(w, cuDeviceGet(&device, w.device), "cuDeviceGet") &&
         Cu(w, cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain") &&
         Cu(w, cuCtxSetCurrent(context), "cuCtxSetCurrent") &&
         (w.creator ? SetUpCreator(w) : SetUpImporter(w));
}

}  // namespace

int main(int argc, char** argv) {
  const bool role_ok = argc == 3 + static_cast<int>(kAllocations) &&
                       (std::strcmp(argv[1], "creator") == 0 || std::strcmp(argv[1], "importer") == 0);
  if (!role_ok) {
    std::fprintf(stderr, "usage: %s creator|importer <device> <bytes> <bytes> <bytes>\n"
                 "(started by 'cusnap demo': control socket on descriptor %d, peer on %d)\n",
                 argv[0], cusnap::cli::demo::kControlFd, cusnap::cli::demo::kPeerFd);
    return 2;
  }
  // The demo is the parent: if it dies, so does the job it started.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 3;
  Worker w;
  w.creator = std::strcmp(argv[1], "creator") == 0;
  w.device = std::atoi(argv[2]);
  for (size_t k = 0; k < kAllocations; ++k) w.allocations[k].size = std::strtoull(argv[3 + k], nullptr, 10);
  FILE* in = ::fdopen(cusnap::cli::demo::kControlFd, "r");
  if (in == nullptr) return 3;
  if (!SetUp(w)) {
    Reply("fail " + w.failure);
    return 1;
  }
  ::close(cusnap::cli::demo::kPeerFd);
  const uint64_t checked = Check(w);
  Reply(checked ? "ready " + std::to_string(checked) : "fail " + w.failure);
  if (!checked) return 1;
  Serve(w, in);
  return 0;
}
