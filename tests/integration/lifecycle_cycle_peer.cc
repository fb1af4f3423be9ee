// One process of the multi-process lifecycle test (lifecycle_cycle_test.cc): an ordinary
// CUDA driver API program, run with the shim preloaded over the simulated driver. The
// creator makes three POSIX-capable allocations (device 0, device 1, HOST_NUMA), maps them
// (one at two VAs, the second at an offset), grants access (one to two devices), fills them
// with known words and sends tickets over descriptor 3 (SCM_RIGHTS) to the importer, which
// imports and maps them. Then both answer commands on stdin, one line each on stdout:
//   check                 every mapped byte holds the pattern: "ok" or "bad <what>"
//   read <k> <word>       word <word> of allocation k through its first mapping: "ok <value>"
//   write <k> <word> <v>  writes it: "ok"
//   touch                 a tracked call (retain at a tracked VA, release): "ok <CUresult>"
//   vas                   the mapped VAs: "ok <va> ..."
//   exit
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>

#include "common/socket.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kTicketSocket = 3;
/// Bound on waiting for the other peer's tickets, ms (ASan, loaded 2-core machine).
constexpr int kTicketWaitMs = 90'000;

// The allocations, their mappings and the pattern each holds.
struct View {
  int allocation;       // 0..2
  CUdeviceptr va;
  size_t size;
  size_t offset;        // into the allocation
};

struct Peer {
  bool creator = false;
  CUmemGenericAllocationHandle handles[3] = {};
  size_t sizes[3] = {2 * kMiB, 4 * kMiB, 2 * kMiB};
  std::vector<View> views;
};

uint32_t Word(int allocation, size_t index) {
  return static_cast<uint32_t>(allocation + 1) * 0x01000193u ^
         static_cast<uint32_t>(index) * 2654435761u;
}

#define CHECK_CU(call)                                                                  \
  do {                                                                                  \
    const CUresult rc_ = (call);                                                        \
    if (rc_ != CUDA_SUCCESS) {                                                          \
      std::printf("bad %s = %d\n", #call, static_cast<int>(rc_));                       \
      std::fflush(stdout);                                                              \
      return false;                                                                     \
    }                                                                                   \
  } while (0)

bool Grant(CUdeviceptr va, size_t size, std::initializer_list<int> devices) {
  std::vector<CUmemAccessDesc> access;
  for (int device : devices) {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = device;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(d);
  }
  CHECK_CU(cuMemSetAccess(va, size, access.data(), access.size()));
  return true;
}

bool MapView(Peer& peer, int allocation, size_t offset, size_t size,
             std::initializer_list<int> devices) {
  CUdeviceptr va = 0;
  CHECK_CU(cuMemAddressReserve(&va, size, 0, 0, 0));
  CHECK_CU(cuMemMap(va, size, offset, peer.handles[allocation], 0));
  if (!Grant(va, size, devices)) return false;
  peer.views.push_back(View{allocation, va, size, offset});
  return true;
}

// Tickets travel over descriptor 3 one per packet (common/socket.h), in allocation order.
bool SendTickets(const int (&tickets)[3]) {
  const char byte = 'T';
  for (int ticket : tickets) {
    if (!cusnap::SendPacket(kTicketSocket, &byte, 1, ticket, cusnap::Deadline::AfterMs(kTicketWaitMs)).ok()) {
      return false;
    }
  }
  return true;
}

// Receives the three tickets; on failure closes any received and returns false.
bool ReceiveTickets(int (&tickets)[3]) {
  for (int k = 0; k < 3; ++k) {
    char byte = 0;
    const auto got =
        cusnap::RecvPacket(kTicketSocket, &byte, 1, &tickets[k], cusnap::Deadline::AfterMs(kTicketWaitMs));
    if (!got.ok() || tickets[k] < 0) {
      for (int i = 0; i < k; ++i) close(tickets[i]);
      return false;
    }
  }
  return true;
}

bool SetUpCreator(Peer& peer) {
  const CUmemLocationType types[3] = {CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_DEVICE,
                                      CU_MEM_LOCATION_TYPE_HOST_NUMA};
  const int ids[3] = {0, 1, 0};
  for (int k = 0; k < 3; ++k) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = types[k];
    prop.location.id = ids[k];
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CHECK_CU(cuMemCreate(&peer.handles[k], peer.sizes[k], &prop, 0));
  }
  if (!MapView(peer, 0, 0, peer.sizes[0], {0, 1})) return false;        // two devices
  if (!MapView(peer, 1, 0, peer.sizes[1], {1})) return false;
  if (!MapView(peer, 1, 2 * kMiB, 2 * kMiB, {0})) return false;         // second VA, offset
  if (!MapView(peer, 2, 0, peer.sizes[2], {0})) return false;           // HOST_NUMA
  for (int k = 0; k < 3; ++k) {
    std::vector<uint32_t> words(peer.sizes[k] / sizeof(uint32_t));
    for (size_t i = 0; i < words.size(); ++i) words[i] = Word(k, i);
    const View* first = nullptr;
    for (const View& v : peer.views) {
      if (v.allocation == k && v.offset == 0 && first == nullptr) first = &v;
    }
    CHECK_CU(cuMemcpyHtoD(first->va, words.data(), peer.sizes[k]));
  }
  // Tickets to the importer, one packet each.
  int tickets[3] = {-1, -1, -1};
  for (int k = 0; k < 3; ++k) {
    CHECK_CU(cuMemExportToShareableHandle(&tickets[k], peer.handles[k],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  }
  if (!SendTickets(tickets)) {
    std::printf("bad send\n");
    return false;
  }
  for (int fd : tickets) close(fd);
  // Allocation 0 lives on through its mapping only (a creator may release its handle).
  CHECK_CU(cuMemRelease(peer.handles[0]));
  peer.handles[0] = 0;
  return true;
}

bool SetUpImporter(Peer& peer) {
  int tickets[3] = {-1, -1, -1};
  if (!ReceiveTickets(tickets)) {
    std::printf("bad receive\n");
    return false;
  }
  for (int k = 0; k < 3; ++k) {
    CHECK_CU(cuMemImportFromShareableHandle(&peer.handles[k],
                                            reinterpret_cast<void*>(static_cast<intptr_t>(tickets[k])),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(tickets[k]);
    if (!MapView(peer, k, 0, peer.sizes[k], {1})) return false;
  }
  return true;
}

bool Check(const Peer& peer) {
  for (const View& v : peer.views) {
    std::vector<uint32_t> words(v.size / sizeof(uint32_t));
    CHECK_CU(cuMemcpyDtoH(words.data(), v.va, v.size));
    const size_t first = v.offset / sizeof(uint32_t);
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] != Word(v.allocation, first + i)) {
        std::printf("bad allocation %d at va 0x%llx word %zu: 0x%08x, expected 0x%08x\n",
                    v.allocation, static_cast<unsigned long long>(v.va), i, words[i],
                    Word(v.allocation, first + i));
        return false;
      }
    }
  }
  std::printf("ok\n");
  return true;
}

const View* FirstView(const Peer& peer, int allocation) {
  for (const View& v : peer.views) {
    if (v.allocation == allocation && v.offset == 0) return &v;
  }
  return nullptr;
}

bool Serve(Peer& peer) {
  char line[256];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    int k = 0;
    size_t word = 0;
    uint32_t value = 0;
    if (std::strncmp(line, "check", 5) == 0) {
      Check(peer);
    } else if (std::sscanf(line, "read %d %zu", &k, &word) == 2 && k >= 0 && k < 3) {
      CHECK_CU(cuMemcpyDtoH(&value, FirstView(peer, k)->va + word * sizeof value, sizeof value));
      std::printf("ok %u\n", value);
    } else if (std::sscanf(line, "write %d %zu %u", &k, &word, &value) == 3 && k >= 0 && k < 3) {
      CHECK_CU(cuMemcpyHtoD(FirstView(peer, k)->va + word * sizeof value, &value, sizeof value));
      std::printf("ok\n");
    } else if (std::strncmp(line, "touch", 5) == 0) {
      CUmemGenericAllocationHandle retained = 0;
      CUresult rc = cuMemRetainAllocationHandle(
          &retained, reinterpret_cast<void*>(peer.views.front().va));
      if (rc == CUDA_SUCCESS) rc = cuMemRelease(retained);
      std::printf("ok %d\n", static_cast<int>(rc));
    } else if (std::strncmp(line, "vas", 3) == 0) {
      std::printf("ok");
      for (const View& v : peer.views) std::printf(" %llu", static_cast<unsigned long long>(v.va));
      std::printf("\n");
    } else if (std::strncmp(line, "exit", 4) == 0) {
      return true;
    } else {
      std::printf("bad command %s", line);
    }
    std::fflush(stdout);
  }
  return true;
}

bool Run(Peer& peer) {
  CHECK_CU(cuInit(0));
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, peer.creator ? 0 : 1));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  if (!(peer.creator ? SetUpCreator(peer) : SetUpImporter(peer))) return false;
  if (!Check(peer)) return false;
  std::fflush(stdout);
  return Serve(peer);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "creator") != 0 && std::strcmp(argv[1], "importer") != 0)) {
    std::fprintf(stderr, "usage: %s creator|importer (tickets on descriptor 3)\n", argv[0]);
    return 2;
  }
  Peer peer;
  peer.creator = std::strcmp(argv[1], "creator") == 0;
  return Run(peer) ? 0 : 1;
}
