// memfds, backing windows and mappings (vmm_backing.h).
//
// An allocation's memfd is named "simcuda-alloc:<id>:<location type>:<location id>:<bytes>:
// <requested handle types>" (a device location as the PHYSICAL GPU: processes may number
// GPUs differently after a restore onto other GPUs, DRIVER-FACTS F7), so an importer learns what it imports from the descriptor alone
// (readlink /proc/self/fd/N). It is created with MFD_ALLOW_SEALING and never sealed: an exported
// descriptor has no seals, unlike a cusnap ticket.
#include "vmm_backing.h"

#include "devices.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

namespace simcuda::vmm::backing {
namespace {

constexpr char kNamePrefix[] = "simcuda-alloc:";

std::string name_of(const Allocation &a) {
  char name[128];
  const int physical = physical_device_of(a);
  std::snprintf(name, sizeof name, "%s%016" PRIx64 ":%d:%d:%zu:%u", kNamePrefix, a.id,
                static_cast<int>(a.prop.location.type), physical >= 0 ? physical : a.prop.location.id, a.size,
                static_cast<unsigned>(a.prop.requestedHandleTypes));
  return name;
}

unsigned char *map_window(int fd, size_t size) {
  void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<unsigned char *>(p);
}

}  // namespace

uint64_t new_id() {
  static std::atomic<uint64_t> sequence{0};
  uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random))
    random = static_cast<uint64_t>(getpid()) << 32;
  // Random high bits make ids unique across processes; the sequence keeps them unique here.
  return (random & ~uint64_t{0xffff}) | (++sequence & 0xffff);
}

CUresult create(Allocation &a, bool keep_fd) {
  int fd = memfd_create(name_of(a).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(a.size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a.backing = map_window(fd, a.size);
  if (a.backing == nullptr) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (keep_fd) {
    a.fd = fd;
  } else {
    close(fd);
    a.fd = -1;
  }
  return CUDA_SUCCESS;
}

void discard(Allocation &a) {
  if (a.backing != nullptr) munmap(a.backing, a.size);
  a.backing = nullptr;
  if (a.fd >= 0) close(a.fd);
  a.fd = -1;
}

bool describe(int fd, Allocation &a) {
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  char link[256];
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  const char *name = std::strstr(link, kNamePrefix);  // "/memfd:simcuda-alloc:... (deleted)"
  if (name == nullptr) return false;
  uint64_t id = 0;
  int type = 0, loc_id = 0;
  size_t size = 0;
  unsigned handle_types = 0;
  if (std::sscanf(name + sizeof kNamePrefix - 1, "%" SCNx64 ":%d:%d:%zu:%u", &id, &type, &loc_id, &size,
                  &handle_types) != 5)
    return false;
  if (static_cast<size_t>(st.st_size) != size || size == 0) return false;
  a.id = id;
  a.size = size;
  a.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  a.prop.location.type = static_cast<CUmemLocationType>(type);
  a.prop.location.id = loc_id;
  if (a.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {  // this process's ordinal for it
    if (auto ordinal = devices::ordinal_of(loc_id)) a.prop.location.id = *ordinal;
    else a.unseen_gpu = loc_id;
  }
  a.prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  return true;
}

bool attach(Allocation &a, int fd) {
  a.backing = map_window(fd, a.size);
  a.fd = -1;
  return a.backing != nullptr;
}

int duplicate_fd(const Allocation &a) { return fcntl(a.fd, F_DUPFD_CLOEXEC, 0); }

bool place(const Allocation &a, size_t offset, CUdeviceptr va, size_t size, int prot) {
  // old_size 0 duplicates a shared mapping: the VA and the window share the same pages.
  void *p = mremap(a.backing + offset, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void *>(va));
  if (p == MAP_FAILED) return false;
  return mprotect(p, size, prot) == 0;
}

void make_reserved(CUdeviceptr va, size_t size) {
  mmap(reinterpret_cast<void *>(va), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

CUdeviceptr reserve_range(size_t size, size_t alignment, CUdeviceptr hint) {
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (hint != 0 && hint % alignment == 0) {
    void *p = mmap(reinterpret_cast<void *>(hint), size, PROT_NONE, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED) return reinterpret_cast<CUdeviceptr>(p);
  }
  // Over-reserve, then trim both ends to the alignment.
  void *p = mmap(nullptr, size + alignment, PROT_NONE, kFlags, -1, 0);
  if (p == MAP_FAILED) return 0;
  auto start = reinterpret_cast<uintptr_t>(p);
  uintptr_t aligned = (start + alignment - 1) / alignment * alignment;
  if (aligned > start) munmap(p, aligned - start);
  uintptr_t end = start + size + alignment;
  if (end > aligned + size) munmap(reinterpret_cast<void *>(aligned + size), end - (aligned + size));
  return aligned;
}

int protection(const AccessFlags &access) {
  int prot = PROT_NONE;
  for (unsigned char flags : access) {
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return PROT_READ | PROT_WRITE;
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ) prot = PROT_READ;
  }
  return prot;
}

void protect(const Mapping &m) { mprotect(reinterpret_cast<void *>(m.va), m.size, protection(m.access)); }

}  // namespace simcuda::vmm::backing
