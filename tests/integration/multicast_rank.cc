// One rank of a multicast team (multicast_cycle_test.cc): an ordinary CUDA driver API program,
// started with `cusnap run` over the simulated driver. Rank r of n works on device r:
//   rank 0 creates a multicast object (n devices, POSIX descriptor handle type, `mc_size`
//   bytes), exports it and sends the ticket over descriptor 3; the others receive it there
//   (the test relays it) and import it. Each rank creates a 2 MiB member on its device, maps
//   it, fills it with rank+1 (float32), adds its device, binds the member at multicast
//   offset `bind_offset` through `abi` (mem, mem2, addr, addr2: the v2 ones are the
//   device-explicit CUDA 13.1 ABI; every bind entry point comes from cuGetProcAddress_v2 at
//   12010 or 13010), maps the multicast object at a VA of its own (bind_offset + 2 MiB bytes)
//   and says "ok".
// Commands on stdin, one answer line each on stdout:
//   reduce            multimem all-reduce (float32) over the member range: "ok" or "bad <rc>"
//   check <v>         every float of the member equals v: "ok" or "bad <first float>"
//   fill <v>          writes v into every float of the member: "ok"
//   rebind            unbinds the member and binds it again with BindAddr v1 (PyTorch): "ok"
//   release           releases the application's multicast handle (the mapping stays): "ok"
//   retain            cuMemRetainAllocationHandle inside the multicast mapping, then releases
//                     it: "ok <same|different>" (same: the handle the VA was mapped with)
//   fault <name> <nth> <rc>   the nth next call of <name> fails with <rc> (simulated driver)
//   exit
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>

#include "common/socket.h"
#include "simcuda/introspection.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kMember = 2 * kMiB;
constexpr int kTicketSocket = 3;

using BindMemV1 = CUresult (*)(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                               size_t, size_t, unsigned long long);
using BindMemV2 = CUresult (*)(CUmemGenericAllocationHandle, CUdevice, size_t,
                               CUmemGenericAllocationHandle, size_t, size_t, unsigned long long);
using BindAddrV1 = CUresult (*)(CUmemGenericAllocationHandle, size_t, CUdeviceptr, size_t,
                                unsigned long long);
using BindAddrV2 = CUresult (*)(CUmemGenericAllocationHandle, CUdevice, size_t, CUdeviceptr,
                                size_t, unsigned long long);

struct Rank {
  int rank = 0;
  int n = 0;
  size_t mc_size = kMember;
  size_t bind_offset = 0;
  std::string abi = "mem";
  CUmemGenericAllocationHandle mc = 0;
  CUmemGenericAllocationHandle member = 0;
  CUdeviceptr member_va = 0;
  CUdeviceptr mc_va = 0;
  size_t mc_map_size = 0;
};

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

#define CHECK_CU(call)                                               \
  do {                                                               \
    const CUresult rc_ = (call);                                     \
    if (rc_ != CUDA_SUCCESS) {                                       \
      Say(std::string("bad ") + #call + " = " + std::to_string(rc_)); \
      return false;                                                  \
    }                                                                \
  } while (0)

void* Resolve(const char* name, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (cuGetProcAddress_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS) {
    return nullptr;
  }
  return fn;
}

// A hook of the simulated driver, looked up like any symbol of libcuda.
void* SimHook(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib != nullptr ? dlsym(lib, name) : nullptr;
}

// Bound on waiting for the test to relay rank 0's ticket, ms (ASan, loaded 2-core machine).
constexpr int kTicketWaitMs = 90'000;

// Sends rank 0's ticket to the test over descriptor 3 (common/socket.h's packets).
bool SendTicket(int ticket) {
  const char byte = 't';
  return cusnap::SendPacket(kTicketSocket, &byte, 1, ticket, cusnap::Deadline::AfterMs(kTicketWaitMs))
      .ok();
}

// The ticket the test relayed over descriptor 3, or -1.
int ReceiveTicket() {
  char byte = 0;
  int ticket = -1;
  const auto got =
      cusnap::RecvPacket(kTicketSocket, &byte, 1, &ticket, cusnap::Deadline::AfterMs(kTicketWaitMs));
  return got.ok() ? ticket : -1;
}

bool Grant(CUdeviceptr va, size_t size, int device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(va, size, &d, 1));
  return true;
}

bool Fill(const Rank& r, float value) {
  std::vector<float> v(kMember / sizeof(float), value);
  CHECK_CU(cuMemcpyHtoD(r.member_va, v.data(), kMember));
  return true;
}

std::string Check(const Rank& r, float value) {
  std::vector<float> v(kMember / sizeof(float));
  if (cuMemcpyDtoH(v.data(), r.member_va, kMember) != CUDA_SUCCESS) return "bad copy";
  for (float f : v) {
    if (f != value) return "bad " + std::to_string(f);
  }
  return "ok";
}

bool Bind(Rank& r, const std::string& abi) {
  if (abi == "mem") {
    auto bind = reinterpret_cast<BindMemV1>(Resolve("cuMulticastBindMem", 12010));
    if (bind == nullptr) return Say("bad resolve"), false;
    CHECK_CU(bind(r.mc, r.bind_offset, r.member, 0, kMember, 0));
  } else if (abi == "mem2") {
    auto bind = reinterpret_cast<BindMemV2>(Resolve("cuMulticastBindMem", 13010));
    if (bind == nullptr) return Say("bad resolve"), false;
    CHECK_CU(bind(r.mc, r.rank, r.bind_offset, r.member, 0, kMember, 0));
  } else if (abi == "addr") {
    auto bind = reinterpret_cast<BindAddrV1>(Resolve("cuMulticastBindAddr", 12010));
    if (bind == nullptr) return Say("bad resolve"), false;
    CHECK_CU(bind(r.mc, r.bind_offset, r.member_va, kMember, 0));
  } else {
    auto bind = reinterpret_cast<BindAddrV2>(Resolve("cuMulticastBindAddr", 13010));
    if (bind == nullptr) return Say("bad resolve"), false;
    CHECK_CU(bind(r.mc, r.rank, r.bind_offset, r.member_va, kMember, 0));
  }
  return true;
}

bool Setup(Rank& r) {
  CHECK_CU(cuInit(0));
  CUdevice device = 0;
  CHECK_CU(cuDeviceGet(&device, r.rank));
  CUcontext context = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));

  CUmulticastObjectProp prop{};
  prop.numDevices = static_cast<unsigned>(r.n);
  prop.size = r.mc_size;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (r.rank == 0) {
    CHECK_CU(cuMulticastCreate(&r.mc, &prop));
    int ticket = -1;
    CHECK_CU(cuMemExportToShareableHandle(&ticket, r.mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (!SendTicket(ticket)) return Say("bad send"), false;
    close(ticket);
  } else {
    const int ticket = ReceiveTicket();
    if (ticket < 0) return Say("bad receive"), false;
    CHECK_CU(cuMemImportFromShareableHandle(&r.mc, reinterpret_cast<void*>(static_cast<intptr_t>(ticket)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(ticket);
  }

  CUmemAllocationProp member{};
  member.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  member.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  member.location.id = r.rank;
  member.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CHECK_CU(cuMemCreate(&r.member, kMember, &member, 0));
  CHECK_CU(cuMemAddressReserve(&r.member_va, kMember, 0, 0, 0));
  CHECK_CU(cuMemMap(r.member_va, kMember, 0, r.member, 0));
  if (!Grant(r.member_va, kMember, r.rank) || !Fill(r, static_cast<float>(r.rank + 1))) return false;

  CHECK_CU(cuMulticastAddDevice(r.mc, r.rank));
  if (!Bind(r, r.abi)) return false;  // waits until every rank added its device
  r.mc_map_size = r.bind_offset + kMember;
  CHECK_CU(cuMemAddressReserve(&r.mc_va, r.mc_map_size, 0, 0, 0));
  CHECK_CU(cuMemMap(r.mc_va, r.mc_map_size, 0, r.mc, 0));
  return Grant(r.mc_va, r.mc_map_size, r.rank);
}

std::string Reduce(const Rank& r) {
  auto reduce = reinterpret_cast<int (*)(uint64_t, uint64_t, uint64_t, int)>(
      SimHook("simcuda_test_multimem_all_reduce"));
  auto mapping_at = reinterpret_cast<int (*)(uint64_t, simcuda_mapping_info*)>(
      SimHook("simcuda_test_mapping_at"));
  if (reduce == nullptr || mapping_at == nullptr) return "bad hooks";
  // The hook takes the driver's own handle of the object: the one behind the multicast VA
  // (the application holds a logical handle, which only the shim understands).
  simcuda_mapping_info info{};
  if (mapping_at(r.mc_va, &info) != 0) return "bad mapping";
  const int rc = reduce(info.allocation_handle, r.bind_offset, kMember, SIMCUDA_MULTIMEM_F32);
  return rc == 0 ? "ok" : "bad " + std::to_string(rc);
}

std::string Serve(Rank& r, const std::string& line) {
  char name[64] = {};
  unsigned nth = 0;
  int rc = 0;
  float value = 0;
  if (line == "reduce") return Reduce(r);
  if (std::sscanf(line.c_str(), "check %f", &value) == 1) return Check(r, value);
  if (std::sscanf(line.c_str(), "fill %f", &value) == 1) return Fill(r, value) ? "ok" : "bad fill";
  if (line == "rebind") {
    if (cuMulticastUnbind(r.mc, r.rank, r.bind_offset, kMember) != CUDA_SUCCESS) return "bad unbind";
    return Bind(r, "addr") ? "ok" : "bad bind";
  }
  if (line == "release") return cuMemRelease(r.mc) == CUDA_SUCCESS ? "ok" : "bad release";
  if (line == "retain") {
    CUmemGenericAllocationHandle h = 0;
    if (cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(r.mc_va)) != CUDA_SUCCESS) return "bad retain";
    const bool same = h == r.mc;
    if (cuMemRelease(h) != CUDA_SUCCESS) return "bad release";
    return same ? "ok same" : "ok different";
  }
  if (std::sscanf(line.c_str(), "fault %63s %u %d", name, &nth, &rc) == 3) {
    auto inject = reinterpret_cast<void (*)(const char*, unsigned, int)>(SimHook("simcuda_test_inject_fault"));
    if (inject == nullptr) return "bad hook";
    inject(name, nth, rc);
    return "ok";
  }
  return "bad command " + line;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <rank> <n> <mem|mem2|addr|addr2> [mc_size bind_offset]\n", argv[0]);
    return 2;
  }
  Rank r;
  r.rank = std::atoi(argv[1]);
  r.n = std::atoi(argv[2]);
  r.abi = argv[3];
  if (argc >= 6) {
    r.mc_size = std::strtoull(argv[4], nullptr, 0);
    r.bind_offset = std::strtoull(argv[5], nullptr, 0);
  }
  if (!Setup(r)) return 1;
  Say("ok");
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, stdin) != nullptr) {
    std::string line(buffer);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line == "exit") return 0;
    Say(Serve(r, line));
  }
  return 0;
}
