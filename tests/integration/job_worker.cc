// One process of the CLI integration tests (cli_job_test.cc): an ordinary CUDA driver API
// program on the simulated driver, usually started through `cusnap run`, driven by a small
// command language so that every scenario is data, not a new program. `job_worker <device>`
// makes the primary context of <device> current, prints "ready" and then answers one line per
// command on stdin, "ok ..." or "bad <what failed>". Descriptor 3 is a SOCK_SEQPACKET channel
// to the test: exported descriptors leave through it and imported ones arrive through it.
//
// Allocations and views (mappings) have names chosen by the test; sizes and offsets are MiB.
//   create A <MiB> dev|host <id> [private]   cuMemCreate, POSIX-descriptor capable (with
//                                  "private": handle type NONE), on a device or a host NUMA node
//   mccreate M <MiB> <devices>     cuMulticastCreate, POSIX-descriptor capable, for that many
//                                  devices; M is then exported, imported and mapped as an
//                                  allocation is
//   mcadd M <device>               cuMulticastAddDevice
//   mcbind M <off MiB> A <MiB>     cuMulticastBindMem of A (from its start) at that offset of M,
//                                  for this worker's device (waits for every device's add)
//   export A                       cuMemExportToShareableHandle; the descriptor goes out on 3
//   import A                       cuMemImportFromShareableHandle of the descriptor on 3
//   release A                      cuMemRelease of A's handle
//   handle A                       "ok <handle>" as the application sees it
//   map V A <off MiB> <MiB> <d,d>  reserve a fresh VA, map A there at the offset, grant
//                                  read-write access to the listed devices: "ok <va>"
//   unmap V                        cuMemUnmap + cuMemAddressFree
//   fill V <seed>                  writes the pattern of allocation seed <seed> over V
//   check V <seed>                 every byte of V holds that pattern: "ok" or "bad ..."
//   read V <word> / write V <word> <value>   one 32-bit word, index counted from V's start
//   retain V                       cuMemRetainAllocationHandle at V (released again): "ok <h>"
//   access V <type> <id> <flags>   cuMemSetAccess of one descriptor (CUmemLocationType and
//                                  flags as numbers) over V: "ok <CUresult>", whatever it is
//   getaccess V <type> <id>        cuMemGetAccess at V: "ok <CUresult> <flags>"
//   info V                         what the driver maps there (simcuda introspection):
//                                  "ok <va> <size> <offset> <allocation id> <location type>
//                                  <location id> <access dev0> <access dev1>"
//   held                           allocations and mappings this process holds in the driver
//                                  (introspection, answered even while checkpointed)
//   meminfo                        cuMemGetInfo on every device: "ok <used0> <used1> ..."
//   uuids                          cuDeviceGetUuid of every ordinal, as 32 hex digits each:
//                                  "ok <uuid0> <uuid1> ..."
//   lock|checkpoint|restore|unlock|state <pid>   the native checkpoint API on another
//                                  process: "ok <CUresult>" ("ok <CUprocessState>" for state)
//   pid                            "ok <pid>"
//   workload V <part> <parts>      starts the in-flight workload on V (job_workload.h)
//   workload-counts                "ok <iterations> <errors> <lost words> <first error> <first lost word>"
//   workload-stop                  stops it and answers its counts
//   heartbeat <ms>                 starts a watchdog (a driver call and a beat every 20 ms)
//                                  and a heartbeat monitor that exits 97 when a sample, at
//                                  least <ms> after the last, finds no new beat
//                                  (job_worker_heartbeat.h: PyTorch's pair in miniature)
//   beats                          "ok <beats> <samples> <ms since the last sample>"
//   inject <entry point> <CUresult>  the next call of that entry point in this process
//                                  fails with that result (simcuda introspection, answered
//                                  even while a command holds the job: the fault matrix)
//   malloc V <bytes>               cuMemAlloc (a view V of all of it): "ok <va>"
//   pitch V <width> <height>       cuMemAllocPitch (4-byte elements): "ok <va> <pitch>"
//   managed <bytes>                cuMemAllocManaged (global): "ok <CUresult>"
//   free V                         cuMemFree of the view's base (forgets the view)
//   ipcget V <offset>              cuIpcGetMemHandle at va+offset; the 64 bytes go out on 3
//   ipcopen V <bytes> <flags>      cuIpcOpenMemHandle_v2 of the handle that came on 3 (a view
//                                  V of <bytes>): "ok <va>"
//   ipcclose V                     cuIpcCloseMemHandle (forgets the view at the last close)
//   range V <offset>               cuMemGetAddressRange at va+offset: "ok <base-va> <size>"
//   attrs V <offset>               cuPointerGetAttributes at va+offset: "ok <legacy IPC capable>
//                                  <allowed handle types> <ordinal> <start-va> <size> <mapped>
//                                  <memory type> <CUresult of cuPointerGetAttribute(RANGE_SIZE)>"
//   exit
//
// `job_worker launch <device>...` is a launcher instead: it never uses CUDA; it forks one
// worker per <device> (exec of this program, so the shim it carries is inherited), the k-th
// on descriptors 10+3k (stdin), 11+3k (stdout) and 12+3k (channel), prints "ready", waits
// for "exit" or end of input, then for its workers; it exits 0 only when all of them did.
// The pattern word at index i (counted in the whole allocation) of seed s is Word(s, i), so
// any view at any offset in any process can be checked against the same seed.
#include <cuda.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/socket.h"
#include "job_workload.h"
#include "job_worker_heartbeat.h"
#include "simcuda/introspection.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kChannel = 3;
constexpr int kChannelTimeoutMs = 60'000;

struct Allocation {
  CUmemGenericAllocationHandle handle = 0;
};

struct View {
  CUdeviceptr va = 0;
  size_t size = 0;
  size_t offset = 0;  // into the allocation, bytes
};

std::map<std::string, Allocation> g_allocations;
std::map<std::string, View> g_views;

uint32_t Word(uint32_t seed, size_t index) {
  return seed * 0x01000193u ^ static_cast<uint32_t>(index) * 2654435761u;
}

/// The reply to one command: "ok ..." or "bad ...".
std::string Bad(const std::string& what) { return "bad " + what; }

std::string CuFailed(const char* call, CUresult rc) {
  return Bad(std::string(call) + " = " + std::to_string(static_cast<int>(rc)));
}

#define CU_OR_REPLY(call)                                   \
  do {                                                      \
    const CUresult rc_ = (call);                            \
    if (rc_ != CUDA_SUCCESS) return CuFailed(#call, rc_);   \
  } while (0)

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string Create(const std::string& name, size_t mib, const std::string& where, int id, bool exportable) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = where == "host" ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = id;
  prop.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  Allocation a;
  CU_OR_REPLY(cuMemCreate(&a.handle, mib * kMiB, &prop, 0));
  g_allocations[name] = a;
  return "ok " + Hex(a.handle);
}

std::string MulticastCreate(const std::string& name, size_t mib, unsigned devices) {
  CUmulticastObjectProp prop{};
  prop.numDevices = devices;
  prop.size = mib * kMiB;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  Allocation m;
  CU_OR_REPLY(cuMulticastCreate(&m.handle, &prop));
  g_allocations[name] = m;
  return "ok " + Hex(m.handle);
}

std::string MulticastBind(const std::string& mc, size_t offset_mib, const std::string& member,
                          size_t mib) {
  const auto m = g_allocations.find(mc);
  const auto a = g_allocations.find(member);
  if (m == g_allocations.end() || a == g_allocations.end()) return Bad("no " + mc + " or " + member);
  CU_OR_REPLY(cuMulticastBindMem(m->second.handle, offset_mib * kMiB, a->second.handle, 0,
                                 mib * kMiB, 0));
  return "ok";
}

std::string Export(const std::string& name) {
  const auto it = g_allocations.find(name);
  if (it == g_allocations.end()) return Bad("no allocation " + name);
  int fd = -1;
  CU_OR_REPLY(cuMemExportToShareableHandle(&fd, it->second.handle,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  const cusnap::Status sent = cusnap::SendPacket(kChannel, name.data(), name.size(), fd,
                                                 cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  ::close(fd);
  if (!sent.ok()) return Bad("send descriptor of " + name + ": " + sent.error().message);
  return "ok";
}

std::string Import(const std::string& name) {
  char buf[256];
  int fd = -1;
  cusnap::Result<size_t> n = cusnap::RecvPacket(
      kChannel, buf, sizeof buf, &fd, cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (!n.ok()) return Bad("receive descriptor of " + name + ": " + n.error().message);
  if (fd < 0) return Bad("no descriptor came with '" + std::string(buf, *n) + "'");
  Allocation a;
  const CUresult rc = cuMemImportFromShareableHandle(
      &a.handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ::close(fd);
  if (rc != CUDA_SUCCESS) return CuFailed("cuMemImportFromShareableHandle", rc);
  g_allocations[name] = a;
  return "ok " + Hex(a.handle);
}

std::string Map(const std::string& view, const std::string& name, size_t offset_mib,
                size_t mib, const std::string& devices) {
  const auto it = g_allocations.find(name);
  if (it == g_allocations.end()) return Bad("no allocation " + name);
  View v;
  v.size = mib * kMiB;
  v.offset = offset_mib * kMiB;
  CU_OR_REPLY(cuMemAddressReserve(&v.va, v.size, 0, 0, 0));
  CU_OR_REPLY(cuMemMap(v.va, v.size, v.offset, it->second.handle, 0));
  std::vector<CUmemAccessDesc> access;
  std::stringstream list(devices);
  std::string device;
  while (std::getline(list, device, ',')) {
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = std::atoi(device.c_str());
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(d);
  }
  CU_OR_REPLY(cuMemSetAccess(v.va, v.size, access.data(), access.size()));
  g_views[view] = v;
  return "ok " + Hex(v.va);
}

// ---- Legacy device memory and legacy IPC ----

std::string Malloc(const std::string& view, size_t bytes) {
  View v;
  v.size = bytes;
  CU_OR_REPLY(cuMemAlloc(&v.va, bytes));
  g_views[view] = v;
  return "ok " + Hex(v.va);
}

std::string IpcGet(const View& v, size_t offset) {
  CUipcMemHandle handle{};
  CU_OR_REPLY(cuIpcGetMemHandle(&handle, v.va + offset));
  const cusnap::Status sent = cusnap::SendPacket(kChannel, handle.reserved, sizeof handle.reserved, -1,
                                                 cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (!sent.ok()) return Bad("send IPC handle: " + sent.error().message);
  return "ok";
}

std::string IpcOpen(const std::string& view, size_t bytes, unsigned flags) {
  CUipcMemHandle handle{};
  int fd = -1;
  cusnap::Result<size_t> n = cusnap::RecvPacket(kChannel, handle.reserved, sizeof handle.reserved, &fd,
                                                cusnap::Deadline::AfterMs(kChannelTimeoutMs));
  if (fd >= 0) ::close(fd);
  if (!n.ok() || *n != sizeof handle.reserved) return Bad("no IPC handle came on the channel");
  View v;
  v.size = bytes;
  CU_OR_REPLY(cuIpcOpenMemHandle(&v.va, handle, flags));
  g_views[view] = v;
  return "ok " + Hex(v.va);
}

// What the application sees of the memory at va: the address range and pointer attributes.
std::string Attributes(CUdeviceptr va) {
  unsigned legacy = 9, mapped = 9, type = 9;
  unsigned long long handle_types = 9;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  void* data[] = {&legacy, &handle_types, &ordinal, &start, &size, &mapped, &type};
  CU_OR_REPLY(cuPointerGetAttributes(7, which, data, va));
  size_t one = 0;
  const CUresult single = cuPointerGetAttribute(&one, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va);
  return "ok " + std::to_string(legacy) + " " + std::to_string(handle_types) + " " + std::to_string(ordinal) +
         " " + Hex(start) + " " + std::to_string(size) + " " + std::to_string(mapped) + " " +
         std::to_string(type) + " " + std::to_string(static_cast<int>(single));
}

const View* FindView(const std::string& name) {
  const auto it = g_views.find(name);
  return it == g_views.end() ? nullptr : &it->second;
}

std::string Fill(const View& v, uint32_t seed) {
  std::vector<uint32_t> words(v.size / sizeof(uint32_t));
  const size_t first = v.offset / sizeof(uint32_t);
  for (size_t i = 0; i < words.size(); ++i) words[i] = Word(seed, first + i);
  CU_OR_REPLY(cuMemcpyHtoD(v.va, words.data(), v.size));
  return "ok";
}

std::string Check(const View& v, uint32_t seed) {
  std::vector<uint32_t> words(v.size / sizeof(uint32_t));
  CU_OR_REPLY(cuMemcpyDtoH(words.data(), v.va, v.size));
  const size_t first = v.offset / sizeof(uint32_t);
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] != Word(seed, first + i) && wrong++ == 0) first_wrong = i;
  }
  if (wrong == 0) return "ok";
  return Bad(std::to_string(wrong) + " words differ at va " + Hex(v.va) + ", first word " +
             std::to_string(first_wrong) + ": " + Hex(words[first_wrong]) + ", expected " +
             Hex(Word(seed, first + first_wrong)));
}

std::string Info(const View& v) {
  simcuda_mapping_info info{};
  if (simcuda_test_mapping_at(v.va, &info) != 0) return Bad("nothing mapped at " + Hex(v.va));
  std::string s = "ok " + Hex(info.va) + " " + std::to_string(info.size) + " " +
                  std::to_string(info.offset) + " " + std::to_string(info.allocation_id) + " " +
                  std::to_string(info.location_type) + " " + std::to_string(info.location_id);
  // Appended piecewise: GCC 12 at -O3 sees `" " + std::string&&` as an overlapping memcpy
  // (a -Werror=restrict false positive that broke the release preset).
  for (int d = 0; d < 2; ++d) s.append(" ").append(std::to_string(info.access[d]));
  return s;
}

std::string Uuids() {
  int count = 0;
  CU_OR_REPLY(cuDeviceGetCount(&count));
  std::string s = "ok";
  for (int d = 0; d < count; ++d) {
    CUuuid uuid{};
    CU_OR_REPLY(cuDeviceGetUuid(&uuid, d));
    char hex[33] = {};
    for (int i = 0; i < 16; ++i) {
      std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    }
    s.append(" ").append(hex);  // not `" " + std::string`: see Info
  }
  return s;
}

std::string MemInfo() {
  int count = 0;
  CU_OR_REPLY(cuDeviceGetCount(&count));
  CUcontext previous = nullptr;
  CU_OR_REPLY(cuCtxGetCurrent(&previous));
  std::string s = "ok";
  for (int d = 0; d < count; ++d) {
    CUcontext ctx = nullptr;
    CU_OR_REPLY(cuDevicePrimaryCtxRetain(&ctx, d));
    CU_OR_REPLY(cuCtxSetCurrent(ctx));
    size_t free = 0, total = 0;
    CU_OR_REPLY(cuMemGetInfo(&free, &total));
    s.append(" ").append(std::to_string(total - free));  // not " " + ...: GCC 12 -O3 -Werror=restrict
    CU_OR_REPLY(cuDevicePrimaryCtxRelease(d));
  }
  CU_OR_REPLY(cuCtxSetCurrent(previous));
  return s;
}

std::string Native(const std::string& op, int pid) {
  CUresult rc = CUDA_ERROR_INVALID_VALUE;
  if (op == "lock") {
    CUcheckpointLockArgs args{};
    args.timeoutMs = 30'000;
    rc = cuCheckpointProcessLock(pid, &args);
  } else if (op == "checkpoint") {
    rc = cuCheckpointProcessCheckpoint(pid, nullptr);
  } else if (op == "restore") {
    rc = cuCheckpointProcessRestore(pid, nullptr);
  } else if (op == "unlock") {
    rc = cuCheckpointProcessUnlock(pid, nullptr);
  } else if (op == "state") {
    CUprocessState state = CU_PROCESS_STATE_FAILED;
    CU_OR_REPLY(cuCheckpointProcessGetState(pid, &state));
    return "ok " + std::to_string(static_cast<int>(state));
  }
  return "ok " + std::to_string(static_cast<int>(rc));
}

/// Runs one command line; returns the reply, or an empty string for "exit".
std::string Execute(const std::string& line) {
  std::istringstream in(line);
  std::string op, a, b, c, d;
  in >> op;
  if (op == "exit") return "";
  if (op == "create") {
    size_t mib = 0;
    int id = 0;
    if (!(in >> a >> mib >> b >> id) || (b != "dev" && b != "host")) return Bad("usage: " + line);
    in >> c;
    return Create(a, mib, b, id, c != "private");
  }
  if (op == "mccreate") {
    size_t mib = 0;
    unsigned devices = 0;
    if (!(in >> a >> mib >> devices)) return Bad("usage: " + line);
    return MulticastCreate(a, mib, devices);
  }
  if (op == "mcadd") {
    int device = 0;
    if (!(in >> a >> device)) return Bad("usage: " + line);
    const auto it = g_allocations.find(a);
    if (it == g_allocations.end()) return Bad("no multicast object " + a);
    CU_OR_REPLY(cuMulticastAddDevice(it->second.handle, device));
    return "ok";
  }
  if (op == "mcbind") {
    size_t offset = 0, mib = 0;
    if (!(in >> a >> offset >> b >> mib)) return Bad("usage: " + line);
    return MulticastBind(a, offset, b, mib);
  }
  if (op == "export" && (in >> a)) return Export(a);
  if (op == "import" && (in >> a)) return Import(a);
  if (op == "release" && (in >> a)) {
    const auto it = g_allocations.find(a);
    if (it == g_allocations.end()) return Bad("no allocation " + a);
    CU_OR_REPLY(cuMemRelease(it->second.handle));
    g_allocations.erase(it);
    return "ok";
  }
  if (op == "handle" && (in >> a)) {
    const auto it = g_allocations.find(a);
    return it == g_allocations.end() ? Bad("no allocation " + a) : "ok " + Hex(it->second.handle);
  }
  if (op == "map") {
    size_t offset = 0, mib = 0;
    if (!(in >> a >> b >> offset >> mib >> c)) return Bad("usage: " + line);
    return Map(a, b, offset, mib, c);
  }
  if (op == "held") {
    return "ok " + std::to_string(simcuda_test_allocation_count()) + " " +
           std::to_string(simcuda_test_mappings(nullptr, 0));
  }
  if (op == "meminfo") return MemInfo();
  if (op == "uuids") return Uuids();
  if (op == "pid") return "ok " + std::to_string(::getpid());
  if (op == "workload-counts") return jobworker::WorkloadCounts();
  if (op == "workload-stop") return jobworker::StopWorkload();
  if (op == "heartbeat") {
    int ms = 0;
    return (in >> ms) ? jobworker::StartHeartbeat(ms) : Bad("usage: heartbeat <ms>");
  }
  if (op == "beats") return jobworker::Beats();
  if (op == "inject") {
    int result = 0;
    if (!(in >> a >> result)) return Bad("usage: " + line);
    simcuda_test_inject_fault(a.c_str(), 1, result);
    return "ok";
  }
  if (op == "lock" || op == "checkpoint" || op == "restore" || op == "unlock" || op == "state") {
    int pid = 0;
    if (!(in >> pid)) return Bad("usage: " + op + " <pid>");
    return Native(op, pid);
  }
  if (op == "malloc") {
    size_t bytes = 0;
    if (!(in >> a >> bytes)) return Bad("usage: " + line);
    return Malloc(a, bytes);
  }
  if (op == "pitch") {
    size_t width = 0, height = 0, pitch = 0;
    if (!(in >> a >> width >> height)) return Bad("usage: " + line);
    View v;
    CU_OR_REPLY(cuMemAllocPitch(&v.va, &pitch, width, height, 4));
    v.size = pitch * height;
    g_views[a] = v;
    return "ok " + Hex(v.va) + " " + std::to_string(pitch);
  }
  if (op == "managed") {
    size_t bytes = 0;
    CUdeviceptr ptr = 0;
    if (!(in >> bytes)) return Bad("usage: " + line);
    return "ok " + std::to_string(static_cast<int>(cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL)));
  }
  if (op == "ipcopen") {
    size_t bytes = 0;
    unsigned flags = 0;
    if (!(in >> a >> bytes >> flags)) return Bad("usage: " + line);
    return IpcOpen(a, bytes, flags);
  }
  // The rest act on a view.
  if (!(in >> a)) return Bad("usage: " + line);
  const View* v = FindView(a);
  if (v == nullptr) return Bad("no view " + a);
  if (op == "unmap") {
    CU_OR_REPLY(cuMemUnmap(v->va, v->size));
    CU_OR_REPLY(cuMemAddressFree(v->va, v->size));
    g_views.erase(a);
    return "ok";
  }
  if (op == "info") return Info(*v);
  if (op == "free") {
    CU_OR_REPLY(cuMemFree(v->va));
    g_views.erase(a);
    return "ok";
  }
  if (op == "ipcclose") {
    CU_OR_REPLY(cuIpcCloseMemHandle(v->va));
    return "ok";
  }
  size_t offset = 0;
  if (op == "ipcget" && (in >> offset)) return IpcGet(*v, offset);
  if (op == "attrs" && (in >> offset)) return Attributes(v->va + offset);
  if (op == "range" && (in >> offset)) {
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OR_REPLY(cuMemGetAddressRange(&base, &size, v->va + offset));
    return "ok " + Hex(base) + " " + std::to_string(size);
  }
  if (op == "workload") {
    int part = 0, parts = 0;
    if (!(in >> part >> parts)) return Bad("usage: workload V <part> <parts>");
    CUcontext context = nullptr;
    CU_OR_REPLY(cuCtxGetCurrent(&context));
    return jobworker::StartWorkload(context, v->va, v->size, part, parts);
  }
  if (op == "retain") {
    CUmemGenericAllocationHandle h = 0;
    CU_OR_REPLY(cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(v->va)));
    CU_OR_REPLY(cuMemRelease(h));
    return "ok " + Hex(h);
  }
  int type = 0;
  int id = 0;
  unsigned flags = 0;
  if (op == "access" && (in >> type >> id >> flags)) {
    const CUmemAccessDesc desc{{static_cast<CUmemLocationType>(type), id},
                            static_cast<CUmemAccess_flags>(flags)};
    return "ok " + std::to_string(static_cast<int>(cuMemSetAccess(v->va, v->size, &desc, 1)));
  }
  if (op == "getaccess" && (in >> type >> id)) {
    const CUmemLocation at{static_cast<CUmemLocationType>(type), id};
    unsigned long long got = 0;
    const CUresult rc = cuMemGetAccess(&got, &at, v->va);
    return "ok " + std::to_string(static_cast<int>(rc)) + " " + std::to_string(got);
  }
  uint32_t seed = 0;
  size_t word = 0;
  if (op == "fill" && (in >> seed)) return Fill(*v, seed);
  if (op == "check" && (in >> seed)) return Check(*v, seed);
  if ((op == "read" || op == "write") && (in >> word)) {
    if (word >= v->size / sizeof(uint32_t)) return Bad("word " + std::to_string(word) + " outside " + a);
    const CUdeviceptr at = v->va + word * sizeof(uint32_t);
    uint32_t value = 0;
    if (op == "read") {
      CU_OR_REPLY(cuMemcpyDtoH(&value, at, sizeof value));
      return "ok " + std::to_string(value);
    }
    if (!(in >> value)) return Bad("usage: write V <word> <value>");
    CU_OR_REPLY(cuMemcpyHtoD(at, &value, sizeof value));
    return "ok";
  }
  return Bad("unknown command: " + line);
}

/// The launcher (see the top of this file).
int Launch(int count, char** devices) {
  std::vector<pid_t> workers;
  for (int k = 0; k < count; ++k) {
    const pid_t pid = ::fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      if (::dup2(10 + 3 * k, 0) < 0 || ::dup2(11 + 3 * k, 1) < 0 || ::dup2(12 + 3 * k, 3) < 0) _exit(126);
      ::close_range(4, ~0U, 0);
      char* argv[] = {const_cast<char*>("job_worker"), devices[k], nullptr};
      ::execv("/proc/self/exe", argv);
      _exit(127);
    }
    workers.push_back(pid);
  }
  ::close_range(10, ~0U, 0);
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr && std::strncmp(line, "exit", 4) != 0) {
  }
  int failed = 0;
  for (pid_t pid : workers) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "launch") == 0) return Launch(argc - 2, argv + 2);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <device> | launch <device>... (commands on stdin, "
                 "descriptors on 3)\n", argv[0]);
    return 2;
  }
  const int device = std::atoi(argv[1]);
  CUcontext context = nullptr;
  CUresult rc = cuInit(0);
  if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxRetain(&context, device);
  if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(context);
  if (rc != CUDA_SUCCESS) {
    std::printf("bad init on device %d: %d\n", device, static_cast<int>(rc));
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  char line[512];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    const std::string reply = Execute(text);
    if (reply.empty()) return 0;
    std::printf("%s\n", reply.c_str());
    std::fflush(stdout);
  }
  return 0;
}
