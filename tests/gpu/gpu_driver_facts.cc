// Measures what the real driver does in the scenarios cusnap relies on, and prints
// one FACT line per observation for docs/DRIVER-FACTS.md. Not a pass/fail test: it exits 0
// when every probe ran, whatever the driver answered. Calls cuMulticastCreate (odd-args, with
// arguments the driver must reject) only when CUSNAP_ALLOW_MULTICAST=1.
//
//   gpu_driver_facts access     HOST vs HOST_NUMA access descriptors on one HOST_NUMA
//                               allocation (does the driver merge the two?)
//   gpu_driver_facts access-device  the same on a DEVICE allocation, and both host kinds in
//                               one cuMemSetAccess (the record's replay)
//   gpu_driver_facts odd-args   bad arguments (second release, export flags 1,
//                               FABRIC/NONE/WIN32 export of a POSIX-only allocation, rejected
//                               cuMemSetAccess, failing cuMulticastCreate): results and
//                               whether outputs are left untouched
//   gpu_driver_facts visible    cuDeviceGetCount / cuDeviceGetUuid / PCI bus id under
//                               CUDA_VISIBLE_DEVICES subsets, orders, UUID and invalid
//                               entries, CUDA_DEVICE_ORDER
//   gpu_driver_facts visible-one  the same on a machine with ONE GPU: "0", the
//                               GPU's UUID, "1" (no such GPU), "0,1", "", "garbage" and more;
//                               prints one ROW line per case, a docs/DRIVER-FACTS.md table row
//   gpu_driver_facts pairs      native restore of a process pinned to one GPU with
//                               incomplete, many-to-one and full gpuPairs
//   gpu_driver_facts ipc-event  an interprocess event opened by a second process through
//                               cuIpcOpenEventHandle, across a native cycle of both
//   gpu_driver_facts ipc-mem    cuMemAlloc memory opened by a second process through
//                               cuIpcOpenMemHandle, across a native cycle of both (F11),
//                               and what cuPointerGetAttribute(s) / cuMemGetAddressRange
//                               answer for cuMemAlloc memory (the shim must answer the same)
//
// Children are this program again (exec of /proc/self/exe with a role), joined to the
// parent by a socket pair on descriptor 3 that carries short text lines.
#include <cuda.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/gpu_check.h"

extern char** environ;

namespace {

const char* Name(CUresult rc) {
  const char* name = nullptr;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr) return "?";
  return name;
}

void Fact(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Fact(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::printf("FACT [%d] ", static_cast<int>(getpid()));
  std::vprintf(fmt, ap);
  std::printf("\n");
  std::fflush(stdout);
  va_end(ap);
}

std::string Uuid(CUdevice dev) {
  CUuuid u{};
  if (cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) return "?";
  char out[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(out, sizeof out,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

// ---- line channel on descriptor 3 -------------------------------------------------------

void SendLine(int fd, const std::string& line) {
  const std::string l = line + "\n";
  if (write(fd, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::exit(3);
}

std::string RecvLine(int fd) {
  std::string out;
  char c;
  while (read(fd, &c, 1) == 1) {
    if (c == '\n') return out;
    out.push_back(c);
  }
  return out;
}

struct Child {
  pid_t pid = -1;
  int fd = -1;
};

Child Spawn(const std::string& role, const std::vector<std::string>& env_extra) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::exit(3);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const std::string& x : env_extra) {
      if (std::strncmp(*e, x.c_str(), x.find('=') + 1) == 0) replaced = true;
    }
    if (!replaced) env.emplace_back(*e);
  }
  // "NAME=UNSET" removes NAME from the child's environment.
  for (const std::string& x : env_extra) {
    if (x.substr(x.find('=') + 1) != "UNSET") env.push_back(x);
  }
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string r = role;
  char* argv[] = {self.data(), r.data(), nullptr};
  Child c;
  if (posix_spawn(&c.pid, "/proc/self/exe", &fa, nullptr, argv, envp.data()) != 0) std::exit(3);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  c.fd = sv[0];
  return c;
}

void Reap(Child& c) {
  if (c.pid <= 0) return;
  kill(c.pid, SIGKILL);
  waitpid(c.pid, nullptr, 0);
  close(c.fd);
  c.pid = -1;
}

// ---- access ------------------------------------------------------------------------------

void QueryAccess(CUdeviceptr va, const char* when) {
  struct {
    CUmemLocationType type;
    int id;
    const char* name;
  } const where[] = {{CU_MEM_LOCATION_TYPE_DEVICE, 0, "DEVICE 0"},
                     {CU_MEM_LOCATION_TYPE_DEVICE, 1, "DEVICE 1"},
                     {CU_MEM_LOCATION_TYPE_HOST, 0, "HOST 0"},
                     {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, "HOST_NUMA 0"}};
  for (const auto& w : where) {
    CUmemLocation loc{};
    loc.type = w.type;
    loc.id = w.id;
    unsigned long long flags = 99;
    const CUresult rc = cuMemGetAccess(&flags, &loc, va);
    Fact("access %s: cuMemGetAccess(%s) = %s, flags %llu", when, w.name, Name(rc), flags);
  }
}

// One access descriptor set on the probe's mapping, then every location asked again.
struct AccessStep {
  CUmemLocationType type;
  int id;
  CUmemAccess_flags flags;
  const char* label;  // "HOST 0 READ"
};

void SetAndQuery(CUdeviceptr va, size_t size, const char* order, const AccessStep& step) {
  CUmemAccessDesc d{};
  d.location.type = step.type;
  d.location.id = step.id;
  d.flags = step.flags;
  Fact("access: [%s] set %s = %s", order, step.label, Name(cuMemSetAccess(va, size, &d, 1)));
  const std::string when = std::string("[") + order + "] after " + step.label;
  QueryAccess(va, when.c_str());
}

// Three orders of access descriptors on a fresh 2 MiB HOST_NUMA allocation each: A and B set
// the host access through HOST and HOST_NUMA in turn; C (two GPUs) gives only device 1
// access first, to tell whether HOST's answer without host access follows device 0.
// The orders above on a fresh allocation at `where` (HOST_NUMA 0 for F12; DEVICE 0 for the
// record's replay: is the host access one value on device memory too, and what does one call with
// both a HOST and a HOST_NUMA descriptor leave, as a replay of two record entries would?).
int ProbeAccessOn(CUmemLocationType where, const char* label) {
  gpu::UsePrimaryContext(0);
  int count = 0;
  cuDeviceGetCount(&count);
  constexpr auto kDevice = CU_MEM_LOCATION_TYPE_DEVICE;
  constexpr auto kHost = CU_MEM_LOCATION_TYPE_HOST;
  constexpr auto kHostNuma = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  constexpr auto kNone = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  constexpr auto kRead = CU_MEM_ACCESS_FLAGS_PROT_READ;
  constexpr auto kRw = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const struct {
    const char* name;
    std::vector<AccessStep> steps;
  } orders[] = {
      {"order A", {{kDevice, 0, kRw, "DEVICE 0 RW"}, {kHost, 0, kRead, "HOST 0 READ"},
                   {kHostNuma, 0, kRw, "HOST_NUMA 0 RW"}, {kHost, 0, kNone, "HOST 0 NONE"}}},
      {"order B", {{kDevice, 0, kRw, "DEVICE 0 RW"}, {kHostNuma, 0, kRead, "HOST_NUMA 0 READ"},
                   {kHost, 0, kRw, "HOST 0 RW"}}},
      {"order C", {{kDevice, 1, kRead, "DEVICE 1 READ"}, {kDevice, 0, kRw, "DEVICE 0 RW"},
                   {kDevice, 0, kNone, "DEVICE 0 NONE"}}},
  };
  for (const auto& order : orders) {
    if (order.name[6] == 'C' && count < 2) continue;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = where;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUmemGenericAllocationHandle h;
    const CUresult rc = cuMemCreate(&h, gran, &prop, 0);
    Fact("access: [%s] cuMemCreate %s, %zu bytes = %s", order.name, label, gran, Name(rc));
    if (rc != CUDA_SUCCESS) return 0;
    CUdeviceptr va;
    cuMemAddressReserve(&va, gran, 0, 0, 0);
    cuMemMap(va, gran, 0, h, 0);
    QueryAccess(va, "after map");
    for (const AccessStep& step : order.steps) SetAndQuery(va, gran, order.name, step);
    // Both host kinds in one call, in each order (what replaying two entries would send).
    for (const bool numa_last : {true, false}) {
      const CUmemAccessDesc host{{kHost, 0}, numa_last ? kRead : kRw};
      const CUmemAccessDesc numa{{kHostNuma, 0}, numa_last ? kRw : kRead};
      const CUmemAccessDesc both[2] = {numa_last ? host : numa, numa_last ? numa : host};
      Fact("access: [%s] set {%s, %s} in one call = %s", order.name,
           numa_last ? "HOST READ" : "HOST_NUMA 0 READ", numa_last ? "HOST_NUMA 0 RW" : "HOST RW",
           Name(cuMemSetAccess(va, gran, both, 2)));
      QueryAccess(va, numa_last ? "after one call, HOST_NUMA last" : "after one call, HOST last");
    }
    cuMemUnmap(va, gran);
    cuMemAddressFree(va, gran);
    cuMemRelease(h);
  }
  return 0;
}

// ---- odd-args ----------------------------------------------------------------------------

// Odd calls on the real driver, for the simulated driver to copy: the result of
// each, and whether the caller's output kept its sentinel ("kept") or was written.
int ProbeOddArgs() {
  gpu::UsePrimaryContext(0);
  constexpr unsigned long long kSentinel = 0xa5a5a5a5a5a5a5a5ull;
  const auto kept = [&](unsigned long long v) { return v == kSentinel ? "kept" : "written"; };
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUmemGenericAllocationHandle h = 0;
  Fact("odd-args: cuMemCreate POSIX = %s", Name(cuMemCreate(&h, gran, &prop, 0)));
  unsigned long long out = kSentinel;
  Fact("odd-args: cuMemCreate size 0 = %s, output %s", Name(cuMemCreate(&out, 0, &prop, 0)), kept(out));
  Fact("odd-args: cuMemCreate flags 1 = %s, output %s", Name(cuMemCreate(&out, gran, &prop, 1)), kept(out));
  int fd = -7;
  Fact("odd-args: export POSIX flags 1 = %s, fd %s",
       Name(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1)),
       fd == -7 ? "kept" : "written");
  unsigned char fabric[64];
  std::memset(fabric, 0xa5, sizeof fabric);
  Fact("odd-args: export FABRIC of a POSIX-only allocation = %s, output %s",
       Name(cuMemExportToShareableHandle(fabric, h, CU_MEM_HANDLE_TYPE_FABRIC, 0)),
       fabric[0] == 0xa5 ? "kept" : "written");
  Fact("odd-args: export NONE = %s", Name(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_NONE, 0)));
  Fact("odd-args: export WIN32 = %s", Name(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0)));
  CUdeviceptr va = 0;
  cuMemAddressReserve(&va, gran, 0, 0, 0);
  cuMemMap(va, gran, 0, h, 0);
  CUmemAccessDesc bad{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, static_cast<CUmemAccess_flags>(7)};
  Fact("odd-args: cuMemSetAccess flags 7 = %s", Name(cuMemSetAccess(va, gran, &bad, 1)));
  bad = {{CU_MEM_LOCATION_TYPE_DEVICE, 99}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  Fact("odd-args: cuMemSetAccess device 99 = %s", Name(cuMemSetAccess(va, gran, &bad, 1)));
  // A rejected call with a valid first descriptor: is anything of it applied?
  const CUmemAccessDesc partial[2] = {{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
                                      {{CU_MEM_LOCATION_TYPE_DEVICE, 99}, CU_MEM_ACCESS_FLAGS_PROT_READ}};
  Fact("odd-args: cuMemSetAccess {DEVICE 0 RW, DEVICE 99 READ} = %s", Name(cuMemSetAccess(va, gran, partial, 2)));
  QueryAccess(va, "after the rejected pair");
  cuMemUnmap(va, gran);
  cuMemAddressFree(va, gran);
  Fact("odd-args: cuMemRelease = %s", Name(cuMemRelease(h)));
  Fact("odd-args: cuMemRelease again = %s", Name(cuMemRelease(h)));
  Fact("odd-args: cuMemMap of the released handle = %s", Name(cuMemMap(va, gran, 0, h, 0)));
  CUmemAllocationProp got{};
  Fact("odd-args: properties of the released handle = %s",
       Name(cuMemGetAllocationPropertiesFromHandle(&got, h)));
  const char* allow = std::getenv("CUSNAP_ALLOW_MULTICAST");
  if (allow == nullptr || std::strcmp(allow, "1") != 0) {
    Fact("odd-args: cuMulticastCreate cases skipped (CUSNAP_ALLOW_MULTICAST is not 1)");
    return 0;
  }
  CUmulticastObjectProp mc{};
  mc.numDevices = 1;
  mc.size = 0;
  mc.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  out = kSentinel;
  Fact("odd-args: cuMulticastCreate size 0 = %s, output %s", Name(cuMulticastCreate(&out, &mc)), kept(out));
  mc.size = gran;
  mc.numDevices = 0;
  Fact("odd-args: cuMulticastCreate 0 devices = %s, output %s", Name(cuMulticastCreate(&out, &mc)), kept(out));
  mc.numDevices = 99;
  Fact("odd-args: cuMulticastCreate 99 devices = %s, output %s", Name(cuMulticastCreate(&out, &mc)), kept(out));
  mc.numDevices = 1;
  mc.flags = 1;
  Fact("odd-args: cuMulticastCreate flags 1 = %s, output %s", Name(cuMulticastCreate(&out, &mc)), kept(out));
  return 0;
}

// ---- visible -----------------------------------------------------------------------------

int VisibleChild() {
  const CUresult init = cuInit(0);
  int count = -1;
  const CUresult crc = cuDeviceGetCount(&count);
  std::string line = std::string("cuInit ") + Name(init) + ", cuDeviceGetCount " + Name(crc) +
                     " count " + std::to_string(count);
  for (int i = 0; i < count; ++i) {
    CUdevice d;
    cuDeviceGet(&d, i);
    int bus = -1;
    cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
    line += "; ordinal " + std::to_string(i) + " = " + Uuid(d) + " bus " + std::to_string(bus);
    CUuuid v1{}, v2{};
    const CUresult r2 = cuDeviceGetUuid_v2(&v2, d);
    const bool same = cuDeviceGetUuid(&v1, d) == CUDA_SUCCESS && r2 == CUDA_SUCCESS &&
                      std::memcmp(v1.bytes, v2.bytes, sizeof v1.bytes) == 0;
    line += same ? " (_v2 the same)" : std::string(" (_v2 ") + Name(r2) + ", differs)";
  }
  if (init == CUDA_SUCCESS) {
    CUdevice past;
    line += std::string("; cuDeviceGet(") + std::to_string(count) + ") " +
            Name(cuDeviceGet(&past, count));
  }
  SendLine(3, line);
  return 0;
}

// What a fresh process answers (VisibleChild) with `env` added to ours.
std::string AskVisibleChild(const std::vector<std::string>& env) {
  Child c = Spawn("visible-child", env);
  const std::string answer = RecvLine(c.fd);
  waitpid(c.pid, nullptr, 0);
  close(c.fd);
  return answer;
}

int ProbeVisible() {
  cuInit(0);
  int count = 0;
  cuDeviceGetCount(&count);
  std::vector<std::string> uuids;
  for (int i = 0; i < count; ++i) {
    CUdevice d;
    cuDeviceGet(&d, i);
    uuids.push_back(Uuid(d));
  }
  const std::string u1 = uuids.size() > 1 ? uuids[1] : "GPU-none";
  const std::vector<std::vector<std::string>> cases = {
      {"CUDA_VISIBLE_DEVICES=UNSET"},
      {"CUDA_VISIBLE_DEVICES=0"},
      {"CUDA_VISIBLE_DEVICES=1"},
      {"CUDA_VISIBLE_DEVICES=1,0"},
      {"CUDA_VISIBLE_DEVICES=1,0", "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES=1,0", "CUDA_DEVICE_ORDER=FASTEST_FIRST"},
      {"CUDA_VISIBLE_DEVICES=" + u1},
      {"CUDA_VISIBLE_DEVICES=" + u1.substr(0, 12)},
      {"CUDA_VISIBLE_DEVICES=" + u1 + ",0"},
      {"CUDA_VISIBLE_DEVICES=0,7"},
      {"CUDA_VISIBLE_DEVICES=0,7,1"},
      {"CUDA_VISIBLE_DEVICES=7"},
      {"CUDA_VISIBLE_DEVICES=7,0"},
      {"CUDA_VISIBLE_DEVICES=0,0"},
      {"CUDA_VISIBLE_DEVICES="},
      {"CUDA_VISIBLE_DEVICES=-1"},
      {"CUDA_VISIBLE_DEVICES=GPU-bogus"},
      {"CUDA_VISIBLE_DEVICES= 1"},
  };
  for (const auto& env : cases) {
    const std::string answer = AskVisibleChild(env);
    std::string what;
    for (const std::string& e : env) what += (what.empty() ? "" : " ") + e;
    Fact("visible: [%s] -> %s", what.c_str(), answer.c_str());
  }
  return 0;
}

// One GPU is enough: what a process is given for each CUDA_VISIBLE_DEVICES value
// a launcher may set on a one-GPU machine, the GPU's UUID named as nvidia-smi writes it.
// Each case is a fresh process (the driver reads the variables once, at cuInit). The ROW
// lines are docs/DRIVER-FACTS.md table rows ("| CVD | cuInit | count | ordinal 0 |").
int ProbeVisibleOne() {
  const char* own = std::getenv("CUDA_VISIBLE_DEVICES");
  Fact("visible-one: this process's CUDA_VISIBLE_DEVICES=%s (the cases below set their own)",
       own == nullptr ? "(unset)" : own);
  // The machine's GPUs as an unrestricted process sees them, PCI bus order.
  const std::string machine =
      AskVisibleChild({"CUDA_VISIBLE_DEVICES=UNSET", "CUDA_DEVICE_ORDER=PCI_BUS_ID"});
  Fact("visible-one: machine: %s", machine.c_str());
  const size_t at = machine.find("ordinal 0 = ");
  const std::string gpu0 = at == std::string::npos ? "GPU-none" : machine.substr(at + 12, 40);
  const std::vector<std::vector<std::string>> cases = {
      {"CUDA_VISIBLE_DEVICES=UNSET"},
      {"CUDA_VISIBLE_DEVICES=0"},
      {"CUDA_VISIBLE_DEVICES=" + gpu0},
      {"CUDA_VISIBLE_DEVICES=" + gpu0.substr(0, 12)},
      {"CUDA_VISIBLE_DEVICES=1"},
      {"CUDA_VISIBLE_DEVICES=0,1"},
      {"CUDA_VISIBLE_DEVICES=1,0"},
      {"CUDA_VISIBLE_DEVICES=" + gpu0 + ",1"},
      {"CUDA_VISIBLE_DEVICES="},
      {"CUDA_VISIBLE_DEVICES=garbage"},
      {"CUDA_VISIBLE_DEVICES=0,garbage"},
      {"CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_ORDER=PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_ORDER=FASTEST_FIRST"},
  };
  for (const auto& env : cases) {
    const std::string answer = AskVisibleChild(env);
    std::string what;
    for (const std::string& e : env) what += (what.empty() ? "`" : " `") + e + "`";
    Fact("visible-one: %s -> %s", what.c_str(), answer.c_str());
    std::printf("ROW | %s | %s |\n", what.c_str(), answer.c_str());
  }
  std::fflush(stdout);
  return 0;
}

// ---- pairs -------------------------------------------------------------------------------

constexpr size_t kPairBytes = 64ull << 20;

// A process pinned by the parent's environment: 64 MiB of private VMM memory on its device 0
// filled with a pattern; reports its GPU, then after each "CHECK" reports its GPU again and
// whether the bytes verify.
int PairsChild() {
  gpu::UsePrimaryContext(0);
  CUdevice dev = 0;  // this process's device 0
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h;
  cuMemCreate(&h, kPairBytes, &prop, 0);
  CUdeviceptr va;
  cuMemAddressReserve(&va, kPairBytes, 0, 0, 0);
  cuMemMap(va, kPairBytes, 0, h, 0);
  CUmemAccessDesc d{};
  d.location = prop.location;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess(va, kPairBytes, &d, 1);
  cuMemsetD32(va, 0x5eedf00d, kPairBytes / 4);
  cuCtxSynchronize();
  SendLine(3, "READY " + Uuid(dev));
  while (true) {
    const std::string cmd = RecvLine(3);
    if (cmd != "CHECK") return 0;
    std::vector<uint32_t> host(kPairBytes / 4);
    const CUresult rc = cuMemcpyDtoH(host.data(), va, kPairBytes);
    size_t bad = 0;
    for (uint32_t v : host) bad += v != 0x5eedf00d;
    CUdevice now;
    cuCtxGetDevice(&now);
    SendLine(3, std::string("copy ") + Name(rc) + ", bad words " + std::to_string(bad) +
                    ", device 0 is " + Uuid(now));
  }
}

CUcheckpointGpuPair Pair(const std::string& from, const std::string& to,
                         const std::vector<CUuuid>& all, const std::vector<std::string>& names) {
  CUcheckpointGpuPair p{};
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == from) p.oldUuid = all[i];
    if (names[i] == to) p.newUuid = all[i];
  }
  return p;
}

void NativeCycle(Child& c, const char* label, std::vector<CUcheckpointGpuPair> pairs) {
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 10000;
  const CUresult l = cuCheckpointProcessLock(c.pid, &lock);
  CUcheckpointCheckpointArgs ck{};
  const CUresult k = cuCheckpointProcessCheckpoint(c.pid, &ck);
  CUcheckpointRestoreArgs ra{};
  ra.gpuPairs = pairs.empty() ? nullptr : pairs.data();
  ra.gpuPairsCount = static_cast<unsigned>(pairs.size());
  const CUresult r = cuCheckpointProcessRestore(c.pid, &ra);
  CUprocessState st{};
  cuCheckpointProcessGetState(c.pid, &st);
  Fact("pairs %s: lock %s, checkpoint %s, restore %s, state after restore %d", label, Name(l),
       Name(k), Name(r), static_cast<int>(st));
  if (r != CUDA_SUCCESS) {
    // Try again with no pairs, then report whether the process can still be unlocked.
    CUcheckpointRestoreArgs none{};
    const CUresult r2 = cuCheckpointProcessRestore(c.pid, &none);
    Fact("pairs %s: a second restore without pairs = %s", label, Name(r2));
  }
  CUcheckpointUnlockArgs un{};
  const CUresult u = cuCheckpointProcessUnlock(c.pid, &un);
  Fact("pairs %s: unlock %s", label, Name(u));
  if (u == CUDA_SUCCESS) {
    SendLine(c.fd, "CHECK");
    Fact("pairs %s: child says: %s", label, RecvLine(c.fd).c_str());
  }
}

int ProbePairs() {
  cuInit(0);
  int count = 0;
  cuDeviceGetCount(&count);
  if (count < 2) {
    Fact("pairs: skipped, %d device(s)", count);
    return 0;
  }
  std::vector<CUuuid> all(2);
  std::vector<std::string> names(2);
  for (int i = 0; i < 2; ++i) {
    CUdevice d;
    cuDeviceGet(&d, i);
    cuDeviceGetUuid(&all[i], d);
    names[i] = Uuid(d);
  }
  struct Case {
    const char* label;
    std::vector<std::pair<int, int>> map;
  } const cases[] = {
      {"full swap {0->1, 1->0}", {{0, 1}, {1, 0}}},
      {"identity {0->0, 1->1}", {{0, 0}, {1, 1}}},
      {"own GPU only, identity {0->0}", {{0, 0}}},
      {"incomplete {0->1}", {{0, 1}}},
      {"many-to-one {0->1, 1->1}", {{0, 1}, {1, 1}}},
      {"identity-of-other {1->0}", {{1, 0}}},
  };
  for (const Case& cs : cases) {
    Child c = Spawn("pairs-child", {"CUDA_VISIBLE_DEVICES=0"});
    Fact("pairs %s: child pinned to CUDA_VISIBLE_DEVICES=0 says %s", cs.label,
         RecvLine(c.fd).c_str());
    std::vector<CUcheckpointGpuPair> pairs;
    for (auto [from, to] : cs.map) pairs.push_back(Pair(names[from], names[to], all, names));
    NativeCycle(c, cs.label, pairs);
    SendLine(c.fd, "EXIT");
    Reap(c);
  }
  return 0;
}

// ---- ipc-event, ipc-mem -----------------------------------------------------------------

// The 64 bytes of a legacy IPC handle as 128 hex digits, and back.
std::string HandleHex(const char (&bytes)[64]) {
  std::string hex;
  for (unsigned char b : bytes) {
    char x[3];
    std::snprintf(x, sizeof x, "%02x", b);
    hex += x;
  }
  return hex;
}
void HandleFromHex(const std::string& hex, char (&bytes)[64]) {
  for (size_t i = 0; i < sizeof bytes; ++i) {
    bytes[i] = static_cast<char>(std::strtoul(hex.substr(2 * i, 2).c_str(), nullptr, 16));
  }
}

// Role A creates an interprocess event and sends its handle; role B opens it. After each
// "USE" both report what the event calls return.
int IpcEventChild(bool creator) {
  gpu::UsePrimaryContext(0);
  CUstream stream;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  CUevent ev = nullptr;
  if (creator) {
    const CUresult c = cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
    CUipcEventHandle handle{};
    const CUresult g = cuIpcGetEventHandle(&handle, ev);
    SendLine(3, std::string("HANDLE ") + HandleHex(handle.reserved) + " create " + Name(c) + " get " + Name(g));
  } else {
    const std::string hex = RecvLine(3);
    CUipcEventHandle handle{};
    HandleFromHex(hex, handle.reserved);
    const CUresult o = cuIpcOpenEventHandle(&ev, handle);
    SendLine(3, std::string("OPENED ") + Name(o));
  }
  CUdeviceptr scratch;
  cuMemAlloc(&scratch, 1 << 20);
  while (true) {
    const std::string cmd = RecvLine(3);
    if (cmd != "USE") return 0;
    const CUresult m = cuMemsetD32Async(scratch, 1, (1 << 20) / 4, stream);
    const CUresult rec = creator ? cuEventRecord(ev, stream) : CUDA_SUCCESS;
    const CUresult wait = cuStreamWaitEvent(stream, ev, 0);
    const CUresult sync = cuEventSynchronize(ev);
    const CUresult q = cuEventQuery(ev);
    const CUresult ss = cuStreamSynchronize(stream);
    SendLine(3, std::string("memset ") + Name(m) + ", record " + Name(rec) + ", streamWait " +
                    Name(wait) + ", eventSync " + Name(sync) + ", query " + Name(q) +
                    ", streamSync " + Name(ss));
  }
}

void LockAndCheckpoint(Child& c, const std::string& who, const char* probe) {
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 10000;
  const CUresult l = cuCheckpointProcessLock(c.pid, &lock);
  CUcheckpointCheckpointArgs ck{};
  const CUresult k = cuCheckpointProcessCheckpoint(c.pid, &ck);
  Fact("%s %s: lock %s, checkpoint %s", probe, who.c_str(), Name(l), Name(k));
}

// Both roles "USE" what they share, then a native lock + checkpoint of both, restore + unlock
// of both (with the state after), and "USE" again by each one that came back; one left stuck
// (F11) is killed. FACT lines start with `probe`.
void IpcNativeCycle(Child& a, Child& b, const std::string& probe) {
  Child* both[] = {&a, &b};
  const char* names[] = {"A", "B"};
  for (int i = 0; i < 2; ++i) {
    SendLine(both[i]->fd, "USE");
    Fact("%s before, %s: %s", probe.c_str(), names[i], RecvLine(both[i]->fd).c_str());
  }
  for (int i = 0; i < 2; ++i) LockAndCheckpoint(*both[i], names[i], probe.c_str());
  for (int i = 0; i < 2; ++i) {
    CUcheckpointRestoreArgs ra{};
    const CUresult r = cuCheckpointProcessRestore(both[i]->pid, &ra);
    CUcheckpointUnlockArgs un{};
    const CUresult u = cuCheckpointProcessUnlock(both[i]->pid, &un);
    CUprocessState state = CU_PROCESS_STATE_FAILED;
    cuCheckpointProcessGetState(both[i]->pid, &state);
    Fact("%s %s: restore %s, unlock %s, state %d", probe.c_str(), names[i], Name(r), Name(u), static_cast<int>(state));
    if (u != CUDA_SUCCESS) {
      kill(both[i]->pid, SIGKILL);  // stuck CHECKPOINTED (F11): nothing else ends it
      continue;
    }
    SendLine(both[i]->fd, "USE");
    Fact("%s after, %s: %s", probe.c_str(), names[i], RecvLine(both[i]->fd).c_str());
  }
}

// What the application sees of cuMemAlloc memory at ptr: attributes and address range.
std::string PointerFacts(CUdeviceptr ptr, CUdeviceptr base) {
  unsigned legacy = 9, mapped = 9, type = 9;
  unsigned long long handle_types = 9;
  int ordinal = -1;
  CUdeviceptr start = 0, range_base = 0;
  size_t size = 0, range_size = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  void* data[] = {&legacy, &handle_types, &ordinal, &start, &size, &mapped, &type};
  const CUresult a = cuPointerGetAttributes(7, which, data, ptr);
  const CUresult r = cuMemGetAddressRange(&range_base, &range_size, ptr);
  char text[320];
  std::snprintf(text, sizeof text,
                "attributes %s: legacy IPC capable %u, allowed handle types %llu, ordinal %d, range start "
                "base%+lld, range size %zu, mapped %u, memory type %u; cuMemGetAddressRange %s: base%+lld, size %zu",
                Name(a), legacy, handle_types, ordinal, static_cast<long long>(start - base), size, mapped, type, Name(r),
                static_cast<long long>(range_base - base), range_size);
  return text;
}

// Role A: cuMemAlloc 256 MiB filled with 0x5a5a5a5a, its IPC handle sent to B; role B opens
// it (lazy peer access). After each "USE" both read word 1000 and report it.
int IpcMemChild(bool creator) {
  gpu::UsePrimaryContext(0);
  CUdeviceptr ptr = 0;
  if (creator) {
    const CUresult m = cuMemAlloc(&ptr, size_t{256} << 20);
    cuMemsetD32(ptr, 0x5a5a5a5a, (size_t{256} << 20) / 4);
    CUipcMemHandle handle{};
    const CUresult g = cuIpcGetMemHandle(&handle, ptr);
    SendLine(3, std::string("HANDLE ") + HandleHex(handle.reserved) + " alloc " + Name(m) + " get " + Name(g));
    for (size_t bytes : {size_t{1000}, size_t{3} << 20}) {  // the shape of small and odd allocations
      CUdeviceptr small = 0;
      cuMemAlloc(&small, bytes);
      Fact("ipc-mem cuMemAlloc(%zu) at +0: %s", bytes, PointerFacts(small, small).c_str());
      Fact("ipc-mem cuMemAlloc(%zu) at +999: %s", bytes, PointerFacts(small + 999, small).c_str());
      Fact("ipc-mem cuMemFree(inner pointer) of cuMemAlloc(%zu): %s", bytes, Name(cuMemFree(small + 512)));
      cuMemFree(small);
    }
    CUdeviceptr zero = 0;
    Fact("ipc-mem cuMemAlloc(0): %s", Name(cuMemAlloc(&zero, 0)));
  } else {
    CUipcMemHandle handle{};
    HandleFromHex(RecvLine(3), handle.reserved);
    const CUresult o = cuIpcOpenMemHandle(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    CUdeviceptr again = 0;
    const CUresult o2 = cuIpcOpenMemHandle(&again, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    SendLine(3, std::string("OPENED ") + Name(o) + ", again " + Name(o2) + (again == ptr ? " (same pointer)" : " (another pointer)") +
                    "; " + PointerFacts(ptr + 100, ptr));
  }
  while (true) {
    const std::string cmd = RecvLine(3);
    if (cmd != "USE") return 0;
    uint32_t word = 0;
    const CUresult r = cuMemcpyDtoH(&word, ptr + 4000, sizeof word);
    char text[96];
    std::snprintf(text, sizeof text, "read %s: 0x%08x", Name(r), word);
    SendLine(3, text);
  }
}

int ProbeIpcMem() {
  cuInit(0);
  Child a = Spawn("ipc-mem-a", {"CUDA_VISIBLE_DEVICES=0"});
  Child b = Spawn("ipc-mem-b", {"CUDA_VISIBLE_DEVICES=0"});
  std::string handle = RecvLine(a.fd);
  Fact("ipc-mem A: %s", handle.substr(handle.find(' ', 7)).c_str());
  SendLine(b.fd, handle.substr(7, 128));
  Fact("ipc-mem B: %s", RecvLine(b.fd).c_str());
  IpcNativeCycle(a, b, "ipc-mem");
  return 0;
}

int ProbeIpcEvent(bool swap) {
  cuInit(0);
  int count = 0;
  cuDeviceGetCount(&count);
  const std::string label = swap ? "two GPUs" : "one GPU";
  Child a = Spawn("ipc-event-a", {"CUDA_VISIBLE_DEVICES=0"});
  Child b = Spawn("ipc-event-b", {swap && count > 1 ? "CUDA_VISIBLE_DEVICES=1" : "CUDA_VISIBLE_DEVICES=0"});
  std::string handle = RecvLine(a.fd);
  Fact("ipc-event (%s) A: %s", label.c_str(), handle.substr(handle.find(' ', 7)).c_str());
  SendLine(b.fd, handle.substr(7, 128));
  Fact("ipc-event (%s) B: %s", label.c_str(), RecvLine(b.fd).c_str());
  IpcNativeCycle(a, b, "ipc-event (" + label + ")");
  Reap(a);
  Reap(b);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "access") return ProbeAccessOn(CU_MEM_LOCATION_TYPE_HOST_NUMA, "HOST_NUMA 0");
  if (what == "access-device") return ProbeAccessOn(CU_MEM_LOCATION_TYPE_DEVICE, "DEVICE 0");
  if (what == "odd-args") return ProbeOddArgs();
  if (what == "visible") return ProbeVisible();
  if (what == "visible-child") return VisibleChild();
  if (what == "visible-one") return ProbeVisibleOne();
  if (what == "pairs") return ProbePairs();
  if (what == "pairs-child") return PairsChild();
  if (what == "ipc-event") return ProbeIpcEvent(false) | ProbeIpcEvent(true);
  if (what == "ipc-event-a") return IpcEventChild(true);
  if (what == "ipc-event-b") return IpcEventChild(false);
  if (what == "ipc-mem") return ProbeIpcMem();
  if (what == "ipc-mem-a") return IpcMemChild(true);
  if (what == "ipc-mem-b") return IpcMemChild(false);
  std::fprintf(stderr, "usage: gpu_driver_facts access|access-device|odd-args|visible|visible-one|pairs|ipc-event|ipc-mem\n");
  return 2;
}
