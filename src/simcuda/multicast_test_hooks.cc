// Test hooks on multicast objects (include/simcuda/introspection.h): what a team records, and a
// host-side stand-in for a multimem all-reduce through the team's bound members.
#include "simcuda/introspection.h"

#include "multicast_objects.h"
#include "vmm.h"
#include "vmm_backing.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace simcuda::multicast {
namespace {

void complain(const char *what, const team::Binding *b) {
  if (b == nullptr) {
    std::fprintf(stderr, "simcuda[%d]: multimem all-reduce: %s\n", static_cast<int>(getpid()), what);
    return;
  }
  std::fprintf(stderr,
               "simcuda[%d]: multimem all-reduce: %s (binding of device %d by pid %d: allocation %016" PRIx64
               ", multicast offset %" PRIu64 ", %" PRIu64 " bytes)\n",
               static_cast<int>(getpid()), what, b->device, b->pid, b->member_id, b->mc_offset, b->size);
}

// Part of the reduced range held by one binding.
struct Piece {
  const team::Binding *binding;
  size_t range_offset;  // bytes into the reduced range
  size_t bytes;
  off_t member_offset;  // bytes into the bound allocation's memfd
};

// Opens the bound allocation's memfd through the binding process's descriptor and checks that
// it is still that allocation (the descriptor number could have been reused). -1 on failure.
int open_member(const team::Binding &b, CUresult *error) {
  if (b.member_fd < 0) {
    complain("the bound allocation keeps no descriptor (imported, or not exportable)", &b);
    *error = CUDA_ERROR_NOT_SUPPORTED;
    return -1;
  }
  std::string path = "/proc/" + std::to_string(b.pid) + "/fd/" + std::to_string(b.member_fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  vmm::Allocation opened;
  if (fd < 0 || !vmm::backing::describe(fd, opened) || opened.id != b.member_id) {
    complain(("cannot open " + path + " (process gone?)").c_str(), &b);
    if (fd >= 0) close(fd);
    *error = CUDA_ERROR_OPERATING_SYSTEM;
    return -1;
  }
  return fd;
}

bool transfer(bool write, int fd, unsigned char *bytes, size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = write ? pwrite(fd, bytes, size, offset) : pread(fd, bytes, size, offset);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

template <typename T>
void accumulate(std::vector<unsigned char> &sum, const std::vector<unsigned char> &add) {
  for (size_t i = 0; i + sizeof(T) <= sum.size(); i += sizeof(T)) {
    T a, b;
    std::memcpy(&a, &sum[i], sizeof a);
    std::memcpy(&b, &add[i], sizeof b);
    a = static_cast<T>(a + b);
    std::memcpy(&sum[i], &a, sizeof a);
  }
}

CUresult all_reduce(const Object &object, uint64_t lo, uint64_t size, int element_type) {
  team::Record &r = *object.record;
  team::Lock lock(&r);
  if (team::devices_added(r) < r.num_devices) {
    complain("the team is not complete", nullptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The pieces of every device, in device order; each device's bindings must cover the range.
  std::vector<std::vector<Piece>> devices;
  for (int d = 0; d < 32; ++d) {
    if ((r.device_mask & (1u << d)) == 0) continue;
    std::vector<Piece> pieces;
    size_t covered = 0;
    for (const team::Binding &b : r.bindings) {
      if (b.serial == 0 || b.device != d) continue;
      uint64_t start = std::max(lo, b.mc_offset), end = std::min(lo + size, b.mc_offset + b.size);
      if (start >= end) continue;
      pieces.push_back({&b, start - lo, end - start, static_cast<off_t>(b.member_offset + (start - b.mc_offset))});
      covered += end - start;  // bindings of one device never overlap
    }
    if (covered != size) {
      std::fprintf(stderr, "simcuda[%d]: multimem all-reduce: device %d has not bound all of [%" PRIu64 ", %" PRIu64 ")\n",
                   static_cast<int>(getpid()), d, lo, lo + size);
      return CUDA_ERROR_INVALID_VALUE;
    }
    devices.push_back(std::move(pieces));
  }
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) close(fd);
  };
  std::vector<unsigned char> sum(size), bytes(size);
  for (size_t d = 0; d < devices.size(); ++d) {
    for (const Piece &p : devices[d]) {
      CUresult error = CUDA_SUCCESS;
      int fd = open_member(*p.binding, &error);
      if (fd < 0) {
        close_all();
        return error;
      }
      fds.push_back(fd);
      if (!transfer(false, fd, &bytes[p.range_offset], p.bytes, p.member_offset)) {
        complain("read failed", p.binding);
        close_all();
        return CUDA_ERROR_OPERATING_SYSTEM;
      }
    }
    if (d == 0) sum = bytes;
    else if (element_type == SIMCUDA_MULTIMEM_F32) accumulate<float>(sum, bytes);
    else accumulate<uint32_t>(sum, bytes);
  }
  size_t next = 0;  // fds were opened in piece order
  for (const auto &pieces : devices) {
    for (const Piece &p : pieces) {
      if (!transfer(true, fds[next++], &sum[p.range_offset], p.bytes, p.member_offset)) {
        complain("write failed", p.binding);
        close_all();
        return CUDA_ERROR_OPERATING_SYSTEM;
      }
    }
  }
  close_all();
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace simcuda::multicast

namespace mc = simcuda::multicast;

extern "C" {

int simcuda_test_multicast_info(uint64_t mc_handle, simcuda_multicast_info *out) {
  std::shared_ptr<mc::Object> object = mc::find(mc_handle);
  if (object == nullptr || out == nullptr) return -1;
  const mc::team::Record &r = *object->record;
  mc::team::Lock lock(object->record);
  *out = simcuda_multicast_info{};
  out->id = r.id;
  out->size = r.size;
  out->capacity = r.capacity;
  out->handle_types = r.handle_types;
  out->num_devices = r.num_devices;
  out->devices_added = r.device_mask;
  for (const mc::team::Binding &b : r.bindings) out->bindings += b.serial != 0 ? 1 : 0;
  out->holders = r.holders;
  return 0;
}

size_t simcuda_test_multicast_bindings(uint64_t mc_handle, simcuda_multicast_binding *out, size_t max) {
  std::shared_ptr<mc::Object> object = mc::find(mc_handle);
  if (object == nullptr) return 0;
  std::vector<simcuda_multicast_binding> all;
  {
    mc::team::Lock lock(object->record);
    for (const mc::team::Binding &b : object->record->bindings)
      if (b.serial != 0) all.push_back({b.device, b.pid, b.mc_offset, b.size, b.member_id, b.member_offset});
  }
  std::sort(all.begin(), all.end(), [](const auto &a, const auto &b) {
    return a.device != b.device ? a.device < b.device : a.mc_offset < b.mc_offset;
  });
  for (size_t i = 0; out != nullptr && i < all.size() && i < max; ++i) out[i] = all[i];
  return all.size();
}

int simcuda_test_multimem_all_reduce(uint64_t mc_handle, uint64_t mc_offset, uint64_t size, int element_type) {
  std::shared_ptr<mc::Object> object = mc::find(mc_handle);
  if (object == nullptr) {
    std::fprintf(stderr, "simcuda[%d]: multimem all-reduce: no multicast object 0x%" PRIx64 " in this process\n",
                 static_cast<int>(getpid()), mc_handle);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const mc::team::Record &r = *object->record;
  if ((element_type != SIMCUDA_MULTIMEM_F32 && element_type != SIMCUDA_MULTIMEM_U32) || size == 0 || size % 4 != 0 ||
      mc_offset % 4 != 0 || mc_offset > r.capacity || size > r.capacity - mc_offset)
    return CUDA_ERROR_INVALID_VALUE;
  return mc::all_reduce(*object, mc_offset, size, element_type);
}

}  // extern "C"
