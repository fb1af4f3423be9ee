// One rank of the workload-kind tests (workload_kinds_test.cc): a CUDA driver API program on
// the simulated driver, started through `cusnap run`, that makes the calls NCCL and PyTorch
// make (DRIVER-FACTS, "How NCCL 2.28.9 and PyTorch 2.11 call the VMM API"), driven by one
// command per line on stdin, one reply per line on stdout ("ok ..." or "bad <what failed>").
// The ranks of a job form a ring: descriptor 3 is a SOCK_SEQPACKET channel to the next rank,
// descriptor 4 one to the previous rank (with two ranks both lead to the other one). Tickets
// go to the next rank and come from the previous one.
//
//   workload_kinds_worker <device> [nocontext]   cuInit; the primary context of <device> is
//                                  made current, unless nocontext: then no context exists
//                                  until the "context" command
//
// Allocations have names chosen by the test; each created or imported one is mapped at once
// at a fresh VA (whole allocation, read-write for this rank's device). Sizes are MiB.
//   create N <MiB> dev|host [nocontext]  cuMemCreate (POSIX-descriptor capable) on this
//                                  rank's device or host NUMA node 0; nocontext: no context is
//                                  current during cuMemCreate (made current again after)
//   context                        retains the primary context of the device, makes it current
//   map N                          reserve + map + access; writes N's pattern: "ok <va>"
//   handle N                       "ok <handle>" as the application sees it
//   export N                       cuMemExportToShareableHandle; the ticket goes to the next rank
//   proxy_start                    a second thread (no context current) waits for one
//                                  "export <handle>" request from the next rank, exports that
//                                  handle value and sends the ticket back (NCCL's proxy)
//   proxy_join                     joins it: "ok <tid of the proxy thread> <main tid>"
//   request N <handle>             asks the previous rank's proxy for <handle>, imports the
//                                  ticket as N
//   import N                       imports the ticket the previous rank sent as N
//   check N                        N's pattern reads back through this rank's mapping
//   poke N <value> / peek N        the 32-bit word at N's byte offset 4096 (cross-process)
//   retain N <count>               <count> cuMemRetainAllocationHandle at addresses spread
//                                  over N's mapping, all kept; every one must return N's
//                                  handle: "ok <handle>"
//   unretain N <count>             cuMemRelease of <count> kept retains of N
//   range N                        cuMemGetAddressRange at 3 points of N's mapping, all
//                                  must agree: "ok <base> <size>"
//   location N                     cuMemGetAllocationPropertiesFromHandle: "ok <type> <id>"
//   uuid                           cuDeviceGetUuid of this rank's device ordinal, 32 hex
//                                  digits: "ok <uuid>" (which GPU the ordinal names now)
//   free N                         unmap, free the VA, release the handle; then releasing the
//                                  same handle value again must fail as the driver fails a dead handle (INVALID_VALUE)
//   many <prefix> <count> <MiB>    creates and maps <count> allocations <prefix>0..
//   exportmany <prefix> <count>    exports the first <count> of them to the next rank
//   importmany <prefix> <count>    imports <count> tickets from the previous rank as <prefix>0..
//   checkall                       every allocation's pattern (sampled: head and tail 4 KiB)
//   exit
// The pattern of an allocation is a function of its creator's device and name (sent with the
// ticket), so creator and importer check the same bytes and no two allocations share a pattern.
#include <cuda.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/socket.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSample = 4096;  // bytes checked at each end of an allocation
constexpr int kToNext = 3;      // channel to the next rank of the ring
constexpr int kToPrevious = 4;  // channel to the previous rank
constexpr int kChannelTimeoutMs = 60'000;

struct Allocation {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
  std::string pattern;  ///< "d<creator's device>/<creator's name>": what its bytes are made of
  std::vector<CUmemGenericAllocationHandle> retained;
};

int g_device = 0;
CUcontext g_context = nullptr;
std::map<std::string, Allocation> g_allocations;

std::string Bad(const std::string& what) { return "bad " + what; }

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

#define CU_OR_REPLY(call)                                                                        \
  do {                                                                                           \
    const CUresult rc_ = (call);                                                                 \
    if (rc_ != CUDA_SUCCESS) return Bad(std::string(#call) + " = " + std::to_string(static_cast<int>(rc_))); \
  } while (0)

/// The byte at `offset` of an allocation of pattern `pattern` (FNV-style mix of both).
uint8_t PatternByte(const std::string& pattern, size_t offset) {
  uint32_t h = 2166136261u;
  for (char c : pattern) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return static_cast<uint8_t>((h >> 8) ^ (offset * 131) ^ (offset >> 12));
}

/// The sampled ranges of an allocation of `size` bytes: head and tail.
std::vector<std::pair<size_t, size_t>> Samples(size_t size) {
  if (size <= 2 * kSample) return {{0, size}};
  return {{0, kSample}, {size - kSample, kSample}};
}

std::string WritePattern(const Allocation& a) {
  for (const auto& [offset, length] : Samples(a.size)) {
    std::vector<uint8_t> bytes(length);
    for (size_t i = 0; i < length; ++i) bytes[i] = PatternByte(a.pattern, offset + i);
    CU_OR_REPLY(cuMemcpyHtoD_v2(a.va + offset, bytes.data(), length));
  }
  return "ok";
}

std::string CheckPattern(const std::string& name, const Allocation& a) {
  for (const auto& [offset, length] : Samples(a.size)) {
    std::vector<uint8_t> bytes(length);
    CU_OR_REPLY(cuMemcpyDtoH_v2(bytes.data(), a.va + offset, length));
    for (size_t i = 0; i < length; ++i) {
      if (bytes[i] != PatternByte(a.pattern, offset + i)) {
        return Bad(name + " (" + a.pattern + "): byte " + std::to_string(offset + i) + " is " +
                   std::to_string(bytes[i]) + ", expected " + std::to_string(PatternByte(a.pattern, offset + i)));
      }
    }
  }
  return "ok";
}

Allocation* Find(const std::string& name) {
  const auto it = g_allocations.find(name);
  return it == g_allocations.end() ? nullptr : &it->second;
}

/// Maps `a` whole at a fresh VA with read-write access for this rank's device.
std::string MapWhole(Allocation& a) {
  CU_OR_REPLY(cuMemAddressReserve(&a.va, a.size, 0, 0, 0));
  CU_OR_REPLY(cuMemMap(a.va, a.size, 0, a.handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = g_device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OR_REPLY(cuMemSetAccess(a.va, a.size, &access, 1));
  return "ok";
}

std::string Create(const std::string& name, size_t mib, const std::string& where, bool no_context) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = where == "host" ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = where == "host" ? 0 : g_device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  Allocation a;
  a.size = mib * kMiB;
  // Built piecewise: GCC 12 at -O3 sees `"d" + std::string&&` as an overlapping memcpy (a
  // -Werror=restrict false positive that broke the release preset).
  a.pattern = std::string("d").append(std::to_string(g_device)).append("/").append(name);
  if (no_context) {
    CU_OR_REPLY(cuCtxSetCurrent(nullptr));
    CUcontext current = nullptr;
    CU_OR_REPLY(cuCtxGetCurrent(&current));
    if (current != nullptr) return Bad("a context is still current");
  }
  const CUresult created = cuMemCreate(&a.handle, a.size, &prop, 0);
  if (no_context && g_context != nullptr) CU_OR_REPLY(cuCtxSetCurrent(g_context));
  CU_OR_REPLY(created);
  g_allocations[name] = a;
  return "ok " + Hex(a.handle);
}

std::string Map(const std::string& name) {
  Allocation* a = Find(name);
  if (a == nullptr) return Bad("no allocation " + name);
  if (std::string r = MapWhole(*a); r != "ok") return r;
  if (std::string r = WritePattern(*a); r != "ok") return r;
  return "ok " + Hex(a->va);
}

std::string SendTicket(const std::string& text, CUmemGenericAllocationHandle handle) {
  int fd = -1;
  CU_OR_REPLY(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  const cusnap::Status sent = cusnap::SendPacket(kToNext, text.data(), text.size(), fd,
                                                 cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  ::close(fd);
  if (!sent.ok()) return Bad("sending the ticket: " + sent.error().message);
  return "ok";
}

/// Imports the ticket that comes next from the previous rank as `name` and maps it.
std::string ImportNext(const std::string& name) {
  char buf[256];
  int fd = -1;
  cusnap::Result<size_t> n = cusnap::RecvPacket(kToPrevious, buf, sizeof buf, &fd,
                                                cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (!n.ok()) return Bad("receiving a ticket for " + name + ": " + n.error().message);
  if (fd < 0) return Bad("no descriptor came with '" + std::string(buf, *n) + "'");
  Allocation a;
  const CUresult rc = cuMemImportFromShareableHandle(
      &a.handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ::close(fd);
  CU_OR_REPLY(rc);
  // The text is "ticket <pattern> <bytes>": the mapping covers the whole allocation.
  std::istringstream words(std::string(buf, *n));
  std::string word;
  words >> word >> a.pattern >> a.size;
  if (a.size == 0) return Bad("no size came with '" + std::string(buf, *n) + "'");
  g_allocations[name] = a;
  Allocation& stored = g_allocations[name];
  if (std::string r = MapWhole(stored); r != "ok") return r;
  return "ok " + Hex(stored.handle);
}

// The proxy thread's outcome, read by proxy_join.
std::thread g_proxy;
std::string g_proxy_result;
long g_proxy_tid = 0;

void ProxyServeOne() {
  g_proxy_tid = static_cast<long>(syscall(SYS_gettid));
  char buf[256];
  int fd = -1;
  cusnap::Result<size_t> n = cusnap::RecvPacket(kToNext, buf, sizeof buf, &fd,
                                                cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (!n.ok()) {
    g_proxy_result = Bad("proxy: receiving a request: " + n.error().message);
    return;
  }
  if (fd >= 0) ::close(fd);
  std::istringstream words(std::string(buf, *n));
  std::string verb, handle_text;
  words >> verb >> handle_text;
  CUcontext current = nullptr;
  if (cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != nullptr) {
    g_proxy_result = Bad("proxy: a context is current on the proxy thread");
    return;
  }
  const CUmemGenericAllocationHandle handle = std::strtoull(handle_text.c_str(), nullptr, 0);
  const Allocation* found = nullptr;
  for (const auto& [name, a] : g_allocations) {
    if (a.handle == handle) found = &a;
  }
  if (verb != "export" || found == nullptr) {
    g_proxy_result = Bad("proxy: request '" + std::string(buf, *n) + "' names no allocation of this rank");
    return;
  }
  g_proxy_result = SendTicket("ticket " + found->pattern + " " + std::to_string(found->size), handle);
}

std::string Request(const std::string& name, const std::string& handle_text) {
  const std::string request = "export " + handle_text;
  const cusnap::Status sent = cusnap::SendPacket(kToPrevious, request.data(), request.size(), -1,
                                                 cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (!sent.ok()) return Bad("sending the request: " + sent.error().message);
  return ImportNext(name);
}

std::string Retain(const std::string& name, int count) {
  Allocation* a = Find(name);
  if (a == nullptr || a->va == 0) return Bad("no mapped allocation " + name);
  for (int i = 0; i < count; ++i) {
    // Spread over the mapping, as PyTorch retains at each block's address.
    const size_t offset = (a->size / static_cast<size_t>(count)) * static_cast<size_t>(i) + static_cast<size_t>(i % 7);
    CUmemGenericAllocationHandle h = 0;
    CU_OR_REPLY(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(a->va + offset)));
    a->retained.push_back(h);
    if (h != a->handle) {
      return Bad("retain " + std::to_string(i) + " at offset " + std::to_string(offset) + " returned " +
                 Hex(h) + ", the mapped handle is " + Hex(a->handle));
    }
  }
  return "ok " + Hex(a->handle);
}

std::string Unretain(const std::string& name, int count) {
  Allocation* a = Find(name);
  if (a == nullptr) return Bad("no allocation " + name);
  if (static_cast<size_t>(count) > a->retained.size()) return Bad("only " + std::to_string(a->retained.size()) + " retains kept");
  for (int i = 0; i < count; ++i) {
    CU_OR_REPLY(cuMemRelease(a->retained.back()));
    a->retained.pop_back();
  }
  return "ok " + std::to_string(a->retained.size());
}

std::string Range(const std::string& name) {
  Allocation* a = Find(name);
  if (a == nullptr || a->va == 0) return Bad("no mapped allocation " + name);
  CUdeviceptr first_base = 0;
  size_t first_size = 0;
  const size_t points[] = {0, a->size / 2 + 5, a->size - 1};
  for (size_t i = 0; i < 3; ++i) {
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OR_REPLY(cuMemGetAddressRange_v2(&base, &size, a->va + points[i]));
    if (i == 0) {
      first_base = base;
      first_size = size;
    } else if (base != first_base || size != first_size) {
      return Bad("cuMemGetAddressRange disagrees inside " + name + ": " + Hex(base) + "+" + std::to_string(size) +
                 " vs " + Hex(first_base) + "+" + std::to_string(first_size));
    }
  }
  return "ok " + Hex(first_base) + " " + std::to_string(first_size);
}

std::string Location(const std::string& name) {
  Allocation* a = Find(name);
  if (a == nullptr) return Bad("no allocation " + name);
  CUmemAllocationProp prop{};
  CU_OR_REPLY(cuMemGetAllocationPropertiesFromHandle(&prop, a->handle));
  return "ok " + std::to_string(static_cast<int>(prop.location.type)) + " " + std::to_string(prop.location.id);
}

std::string Uuid() {
  CUuuid uuid{};
  CU_OR_REPLY(cuDeviceGetUuid(&uuid, g_device));
  char hex[33] = {};
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
  return "ok " + std::string(hex);
}

std::string Free(const std::string& name) {
  Allocation* a = Find(name);
  if (a == nullptr) return Bad("no allocation " + name);
  if (!a->retained.empty()) return Bad(name + " still has " + std::to_string(a->retained.size()) + " retains");
  CU_OR_REPLY(cuMemUnmap(a->va, a->size));
  CU_OR_REPLY(cuMemAddressFree(a->va, a->size));
  CU_OR_REPLY(cuMemRelease(a->handle));
  const CUresult again = cuMemRelease(a->handle);
  if (again != CUDA_ERROR_INVALID_VALUE) {
    return Bad("releasing " + name + "'s handle a second time returned " + std::to_string(static_cast<int>(again)) +
               ", expected CUDA_ERROR_INVALID_VALUE (a retain or mapping reference was left over)");
  }
  g_allocations.erase(name);
  return "ok";
}

std::string Many(const std::string& prefix, int count, size_t mib) {
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix + std::to_string(i);
    if (std::string r = Create(name, mib, "dev", false); r.rfind("ok", 0) != 0) return r;
    if (std::string r = Map(name); r.rfind("ok", 0) != 0) return r;
  }
  return "ok";
}

std::string ExportMany(const std::string& prefix, int count) {
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix + std::to_string(i);
    Allocation* a = Find(name);
    if (a == nullptr) return Bad("no allocation " + name);
    if (std::string r = SendTicket("ticket " + a->pattern + " " + std::to_string(a->size), a->handle); r != "ok") return r;
  }
  return "ok";
}

std::string ImportMany(const std::string& prefix, int count) {
  for (int i = 0; i < count; ++i) {
    if (std::string r = ImportNext(prefix + std::to_string(i)); r.rfind("ok", 0) != 0) return r;
  }
  return "ok";
}

std::string CheckAll() {
  for (const auto& [name, a] : g_allocations) {
    if (a.va == 0) continue;
    if (std::string r = CheckPattern(name, a); r != "ok") return r;
  }
  return "ok " + std::to_string(g_allocations.size());
}

std::string Poke(const std::string& name, uint32_t value, bool write) {
  Allocation* a = Find(name);
  if (a == nullptr || a->va == 0) return Bad("no mapped allocation " + name);
  if (write) {
    CU_OR_REPLY(cuMemcpyHtoD_v2(a->va + 4096, &value, sizeof value));
    return "ok";
  }
  uint32_t got = 0;
  CU_OR_REPLY(cuMemcpyDtoH_v2(&got, a->va + 4096, sizeof got));
  return "ok " + std::to_string(got);
}

std::string Handle(const std::string& line) {
  std::istringstream in(line);
  std::string verb, name, arg;
  in >> verb >> name;
  if (verb == "create") {
    size_t mib = 0;
    std::string where, flag;
    in >> mib >> where >> flag;
    return Create(name, mib, where, flag == "nocontext");
  }
  if (verb == "map") return Map(name);
  if (verb == "context") {
    CUdevice device = 0;
    CU_OR_REPLY(cuDeviceGet(&device, g_device));
    CU_OR_REPLY(cuDevicePrimaryCtxRetain(&g_context, device));
    CU_OR_REPLY(cuCtxSetCurrent(g_context));
    return "ok";
  }
  if (verb == "handle") {
    Allocation* a = Find(name);
    return a ? "ok " + Hex(a->handle) : Bad("no allocation " + name);
  }
  if (verb == "export") {
    Allocation* a = Find(name);
    return a ? SendTicket("ticket " + a->pattern + " " + std::to_string(a->size), a->handle) : Bad("no allocation " + name);
  }
  if (verb == "proxy_start") {
    g_proxy_result.clear();
    g_proxy = std::thread(ProxyServeOne);
    return "ok";
  }
  if (verb == "proxy_join") {
    if (!g_proxy.joinable()) return Bad("no proxy thread");
    g_proxy.join();
    if (g_proxy_result != "ok") return g_proxy_result;
    return "ok " + std::to_string(g_proxy_tid) + " " + std::to_string(static_cast<long>(syscall(SYS_gettid)));
  }
  if (verb == "request") {
    in >> arg;
    return Request(name, arg);
  }
  if (verb == "import") return ImportNext(name);
  if (verb == "check") {
    Allocation* a = Find(name);
    return a ? CheckPattern(name, *a) : Bad("no allocation " + name);
  }
  if (verb == "poke" || verb == "peek") {
    uint32_t value = 0;
    in >> value;
    return Poke(name, value, verb == "poke");
  }
  if (verb == "retain" || verb == "unretain" || verb == "many" || verb == "exportmany" || verb == "importmany") {
    int count = 0;
    size_t mib = 0;
    in >> count >> mib;
    if (verb == "retain") return Retain(name, count);
    if (verb == "unretain") return Unretain(name, count);
    if (verb == "many") return Many(name, count, mib);
    if (verb == "exportmany") return ExportMany(name, count);
    return ImportMany(name, count);
  }
  if (verb == "range") return Range(name);
  if (verb == "location") return Location(name);
  if (verb == "uuid") return Uuid();
  if (verb == "free") return Free(name);
  if (verb == "checkall") return CheckAll();
  return Bad("unknown command '" + line + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::strcmp(argv[2], "nocontext") != 0)) {
    std::fprintf(stderr, "usage: workload_kinds_worker <device> [nocontext]\n");
    return 2;
  }
  g_device = std::atoi(argv[1]);
  const bool with_context = argc == 2;
  CUdevice device = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, g_device) != CUDA_SUCCESS ||
      (with_context && (cuDevicePrimaryCtxRetain(&g_context, device) != CUDA_SUCCESS ||
                        cuCtxSetCurrent(g_context) != CUDA_SUCCESS))) {
    std::printf("bad init of device %d\n", g_device);
    return 1;
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "exit") break;
    std::printf("%s\n", Handle(line).c_str());
    std::fflush(stdout);
  }
  if (g_proxy.joinable()) g_proxy.join();
  return 0;
}
