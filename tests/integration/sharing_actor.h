// Helpers shared by the sharing actors (actor_share.cc): small programs that run on the
// simulated driver with the shim preloaded, one role each, and talk to their peer (or the
// test) over a SOCK_SEQPACKET channel on descriptor 3. Every check that fails prints what
// was expected and exits non-zero, so the test asserts exit codes and shows stderr.
#pragma once

#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/socket.h"

namespace actor {

inline constexpr int kChannel = 3;
inline constexpr int kTimeoutMs = 60'000;
inline std::string g_role = "actor";

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "actor %s (pid %d): FAIL: %s\n", g_role.c_str(), getpid(), what.c_str());
  std::fflush(stderr);
  _exit(1);
}

inline void Check(bool ok, const std::string& what) {
  if (!ok) Fail(what);
}

inline void CheckCu(CUresult rc, CUresult want, const char* call, int line) {
  if (rc != want) {
    Fail(std::string(call) + " (line " + std::to_string(line) + ") returned " +
         std::to_string(static_cast<int>(rc)) + ", expected " + std::to_string(static_cast<int>(want)));
  }
}
#define CU(call) ::actor::CheckCu((call), CUDA_SUCCESS, #call, __LINE__)
#define CU_EXPECT(want, call) ::actor::CheckCu((call), (want), #call, __LINE__)

/// A message on the channel: text plus at most one descriptor.
struct Msg {
  std::string text;
  int fd = -1;
};

inline void Send(int channel, const std::string& text, int fd = -1) {
  cusnap::Status s = cusnap::SendPacket(channel, text.data(), text.size(), fd,
                                        cusnap::Deadline::AfterMs(kTimeoutMs));
  Check(s.ok(), "send '" + text + "': " + (s.ok() ? "" : s.error().message));
}

inline Msg Recv(int channel) {
  char buf[512];
  Msg m;
  cusnap::Result<size_t> n = cusnap::RecvPacket(channel, buf, sizeof buf, &m.fd,
                                                cusnap::Deadline::AfterMs(kTimeoutMs));
  Check(n.ok(), "receive: " + (n.ok() ? std::string() : n.error().message));
  m.text.assign(buf, *n);
  return m;
}

inline Msg Expect(int channel, const std::string& prefix) {
  Msg m = Recv(channel);
  Check(m.text.rfind(prefix, 0) == 0, "expected '" + prefix + "', got '" + m.text + "'");
  return m;
}

/// Context on device 0, current on this thread.
inline CUcontext Init() {
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  return ctx;
}

inline CUmemAllocationProp Prop(bool posix) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = posix ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

inline size_t Granularity() {
  CUmemAllocationProp prop = Prop(true);
  size_t g = 0;
  CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

/// Reserves a VA range, maps `handle` there and grants device 0 read-write.
inline CUdeviceptr MapNew(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, size, 0, 0, 0));
  CU(cuMemMap(va, size, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, size, &access, 1));
  return va;
}

inline void Unmap(CUdeviceptr va, size_t size) {
  CU(cuMemUnmap(va, size));
  CU(cuMemAddressFree(va, size));
}

inline uint8_t PatternByte(uint32_t seed, size_t i) {
  return static_cast<uint8_t>((i * 131 + seed * 17 + (i >> 12)) & 0xff);
}

inline void WritePattern(CUdeviceptr va, size_t offset, size_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = PatternByte(seed, offset + i);
  CU(cuMemcpyHtoD_v2(va + offset, bytes.data(), size));
}

inline void CheckPattern(CUdeviceptr va, size_t offset, size_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  CU(cuMemcpyDtoH_v2(bytes.data(), va + offset, size));
  for (size_t i = 0; i < size; ++i) {
    if (bytes[i] != PatternByte(seed, offset + i)) {
      Fail("byte " + std::to_string(offset + i) + " is " + std::to_string(bytes[i]) +
           ", expected " + std::to_string(PatternByte(seed, offset + i)) + " (seed " +
           std::to_string(seed) + ")");
    }
  }
}

inline bool IsLogical(uint64_t handle) { return (handle >> 48) == 0xC5A9; }

/// Descriptors in this process whose target names a simulated-driver allocation memfd (a
/// raw CUDA export descriptor).
inline int CountRawDescriptors() {
  int count = 0;
  DIR* d = opendir("/proc/self/fd");
  Check(d != nullptr, "opendir /proc/self/fd");
  while (dirent* e = readdir(d)) {
    char path[300], target[512];
    std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strstr(target, "simcuda-alloc") != nullptr) ++count;
  }
  closedir(d);
  return count;
}

}  // namespace actor
