// A failed call must leave no trace: every hand-written hook (src/shim/hooks)
// called with odd arguments, one line per call: "<case>|<result>|<outputs>". Outputs are
// described, not printed (a logical handle or a ticket differs from the raw value by design):
// "kept" when the call left the caller's sentinel, "written" otherwise, and values that must
// match (access flags, sizes) in full. transparency_test runs this with and without the shim
// and compares line by line.
#include <cuda.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr unsigned long long kSentinel = 0xa5a5a5a5a5a5a5a5ull;
constexpr size_t kSize = 2u << 20;

void Line(const char* name, CUresult rc, const char* outputs = "-") {
  std::printf("%s|%d|%s\n", name, static_cast<int>(rc), outputs);
}

const char* Kept(unsigned long long value) { return value == kSentinel ? "kept" : "written"; }

CUmemAllocationProp Prop(unsigned long long types, int device = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
  return prop;
}

// A live tracked allocation (POSIX), mapped at *va with device 0 RW.
CUmemGenericAllocationHandle Live(CUdeviceptr* va) {
  CUmemAllocationProp prop = Prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h = 0;
  cuMemCreate(&h, kSize, &prop, 0);
  cuMemAddressReserve(va, kSize, 0, 0, 0);
  cuMemMap(*va, kSize, 0, h, 0);
  CUmemAccessDesc rw{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  cuMemSetAccess(*va, kSize, &rw, 1);
  return h;
}

// A tracked allocation already released (a dead handle).
CUmemGenericAllocationHandle Released() {
  CUmemAllocationProp prop = Prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h = 0;
  cuMemCreate(&h, kSize, &prop, 0);
  cuMemRelease(h);
  return h;
}

void Unicast() {
  CUmemAllocationProp posix = Prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  unsigned long long out = kSentinel;
  Line("create null handle", cuMemCreate(nullptr, kSize, &posix, 0));
  Line("create size 0", cuMemCreate(&out, 0, &posix, 0), Kept(out));
  Line("create flags 1", cuMemCreate(&out, kSize, &posix, 1), Kept(out));
  Line("create null prop", cuMemCreate(&out, kSize, nullptr, 0), Kept(out));
  CUmemAllocationProp unknown = Prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | 0x100);
  Line("create unknown handle type", cuMemCreate(&out, kSize, &unknown, 0), Kept(out));
  CUmemAllocationProp bad_device = Prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 99);
  Line("create device 99", cuMemCreate(&out, kSize, &bad_device, 0), Kept(out));

  const CUmemGenericAllocationHandle dead = Released();
  Line("release released", cuMemRelease(dead));
  Line("map released", cuMemMap(0x7f0000000000ull, kSize, 0, dead, 0));
  int fd = static_cast<int>(kSentinel & 0x7fffffff);
  const int fd_sentinel = fd;
  Line("export released", cuMemExportToShareableHandle(&fd, dead, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       fd == fd_sentinel ? "kept" : "written");
  CUmemAllocationProp got{};
  Line("properties released", cuMemGetAllocationPropertiesFromHandle(&got, dead));
  Line("release unknown", cuMemRelease(0x1234));

  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle live = Live(&va);
  Line("export null output", cuMemExportToShareableHandle(nullptr, live, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  Line("export flags 1", cuMemExportToShareableHandle(&fd, live, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
       fd == fd_sentinel ? "kept" : "written");
  unsigned char fabric[64];
  std::memset(fabric, 0xa5, sizeof fabric);
  Line("export fabric of posix-only", cuMemExportToShareableHandle(fabric, live, CU_MEM_HANDLE_TYPE_FABRIC, 0),
       fabric[0] == 0xa5 ? "kept" : "written");
  Line("export none", cuMemExportToShareableHandle(&fd, live, CU_MEM_HANDLE_TYPE_NONE, 0),
       fd == fd_sentinel ? "kept" : "written");
  Line("export win32", cuMemExportToShareableHandle(&fd, live, CU_MEM_HANDLE_TYPE_WIN32, 0),
       fd == fd_sentinel ? "kept" : "written");
  Line("properties null output", cuMemGetAllocationPropertiesFromHandle(nullptr, live));
  Line("retain null output", cuMemRetainAllocationHandle(nullptr, reinterpret_cast<void*>(va)));
  out = kSentinel;
  Line("retain unmapped address", cuMemRetainAllocationHandle(&out, reinterpret_cast<void*>(0x10)), Kept(out));
  Line("import null output", cuMemImportFromShareableHandle(nullptr, reinterpret_cast<void*>(intptr_t{0}),
                                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  Line("import fd -1", cuMemImportFromShareableHandle(&out, reinterpret_cast<void*>(intptr_t{-1}),
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), Kept(out));
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  Line("import /dev/null", cuMemImportFromShareableHandle(&out, reinterpret_cast<void*>(intptr_t{devnull}),
                                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), Kept(out));
  close(devnull);
  Line("import fabric type", cuMemImportFromShareableHandle(&out, fabric, CU_MEM_HANDLE_TYPE_FABRIC), Kept(out));
  Line("map flags 1", cuMemMap(va, kSize, 0, live, 1));
  Line("map size 0", cuMemMap(va, 0, 0, live, 0));
  Line("unmap unmapped", cuMemUnmap(0x7f0000000000ull, kSize));
  Line("unmap size 0", cuMemUnmap(va, 0));

  // Access: rejected calls change nothing, here and in what a checkpoint would replay.
  CUmemAccessDesc bad_flags{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, static_cast<CUmemAccess_flags>(7)};
  Line("set access flags 7", cuMemSetAccess(va, kSize, &bad_flags, 1));
  CUmemAccessDesc bad_device_access{{CU_MEM_LOCATION_TYPE_DEVICE, 99}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  Line("set access device 99", cuMemSetAccess(va, kSize, &bad_device_access, 1));
  Line("set access count 0", cuMemSetAccess(va, kSize, &bad_flags, 0));
  Line("set access null descriptors", cuMemSetAccess(va, kSize, nullptr, 1));
  Line("set access size 0", cuMemSetAccess(va, 0, &bad_flags, 1));
  const CUmemAccessDesc three[3] = {
      {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
      {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READ},
      {{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ}};
  Line("set access three descriptors", cuMemSetAccess(va, kSize, three, 3));
  const CUmemLocation where[4] = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                  {CU_MEM_LOCATION_TYPE_DEVICE, 1},
                                  {CU_MEM_LOCATION_TYPE_HOST, 0},
                                  {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}};
  for (const CUmemLocation& at : where) {
    unsigned long long flags = kSentinel;
    const CUresult rc = cuMemGetAccess(&flags, &at, va);
    char text[64];
    std::snprintf(text, sizeof text, "type %d id %d flags %llx", static_cast<int>(at.type), at.id, flags);
    Line("get access", rc, text);
  }
  Line("get access null flags", cuMemGetAccess(nullptr, &where[0], va));
  CUmemLocation bogus{static_cast<CUmemLocationType>(77), 0};
  unsigned long long flags = kSentinel;
  Line("get access unknown location type", cuMemGetAccess(&flags, &bogus, va), Kept(flags));
  CUdeviceptr base = kSentinel;
  size_t size = 0;
  Line("address range null outputs", cuMemGetAddressRange(nullptr, nullptr, va));
  const CUresult range = cuMemGetAddressRange(&base, &size, va + 4096);
  char text[64];
  std::snprintf(text, sizeof text, "base-offset %llx size %zu", static_cast<unsigned long long>(va - base), size);
  Line("address range inside", range, text);
}

void Multicast() {
  unsigned long long out = kSentinel;
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.size = kSize;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  Line("multicast create null output", cuMulticastCreate(nullptr, &prop));
  Line("multicast create null prop", cuMulticastCreate(&out, nullptr), Kept(out));
  CUmulticastObjectProp odd = prop;
  odd.size = 0;
  Line("multicast create size 0", cuMulticastCreate(&out, &odd), Kept(out));
  odd = prop;
  odd.numDevices = 0;
  Line("multicast create 0 devices", cuMulticastCreate(&out, &odd), Kept(out));
  odd.numDevices = 99;
  Line("multicast create 99 devices", cuMulticastCreate(&out, &odd), Kept(out));
  odd = prop;
  odd.flags = 1;
  Line("multicast create flags 1", cuMulticastCreate(&out, &odd), Kept(out));

  CUmemGenericAllocationHandle mc = 0;
  Line("multicast create", cuMulticastCreate(&mc, &prop));
  Line("multicast release", cuMemRelease(mc));
  Line("multicast release released", cuMemRelease(mc));
  Line("multicast add device released", cuMulticastAddDevice(mc, 0));
  CUdeviceptr va = 0;
  const CUmemGenericAllocationHandle member = Live(&va);
  Line("multicast bind mem released", cuMulticastBindMem(mc, 0, member, 0, kSize, 0));
  Line("multicast bind addr released", cuMulticastBindAddr(mc, 0, va, kSize, 0));
  Line("multicast unbind released", cuMulticastUnbind(mc, 0, 0, kSize));
  CUmemAllocationProp got{};
  Line("multicast properties released", cuMemGetAllocationPropertiesFromHandle(&got, mc));
  Line("multicast map released", cuMemMap(0x7f0000000000ull, kSize, 0, mc, 0));
  int fd = -7;
  Line("multicast export released", cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       fd == -7 ? "kept" : "written");
}

}  // namespace

int main() {
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&context, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    std::printf("no driver\n");
    return 1;
  }
  Unicast();
  Multicast();
  std::printf("done\n");
  return 0;
}
