// The shared counters of interprocess events (ipc_events.h).
#include "ipc_events.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace simcuda::ipc_events {
namespace {

constexpr uint32_t kIpcEventMagic = 0x45504953;  // "SIPE"
constexpr char kName[] = "simcuda-ipc-event";

// What a simcuda CUipcEventHandle holds (64 bytes: CU_IPC_HANDLE_SIZE).
struct Wire {
  uint32_t magic = kIpcEventMagic;
  int32_t pid = 0;
  int32_t fd = -1;
};
static_assert(sizeof(Wire) <= sizeof(CUipcEventHandle));

bool map_counters(int fd, Hold *hold) {
  void *p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  hold->shared = static_cast<Shared *>(p);
  hold->fd = fd;
  return true;
}

// Whether `fd` is the memfd of an interprocess event ("/memfd:simcuda-ipc-event (deleted)").
bool is_event_memfd(int fd) {
  char link[256] = {};
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (readlink(path.c_str(), link, sizeof link - 1) <= 0) return false;
  return std::strstr(link, kName) != nullptr;
}

}  // namespace

CUresult create(Hold *hold) {
  const int fd = memfd_create(kName, MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, sizeof(Shared)) != 0 || !map_counters(fd, hold)) {  // a fresh memfd reads zero
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

void describe(const Hold &hold, CUipcEventHandle *handle) {
  Wire wire;
  wire.pid = static_cast<int32_t>(getpid());
  wire.fd = hold.fd;
  std::memset(handle, 0, sizeof *handle);
  std::memcpy(handle->reserved, &wire, sizeof wire);
}

CUresult open(const CUipcEventHandle &handle, Hold *hold) {
  Wire wire;
  std::memcpy(&wire, handle.reserved, sizeof wire);
  if (wire.magic != kIpcEventMagic) return CUDA_ERROR_INVALID_VALUE;
  if (wire.pid == static_cast<int32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  const std::string path = "/proc/" + std::to_string(wire.pid) + "/fd/" + std::to_string(wire.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!is_event_memfd(fd) || !map_counters(fd, hold)) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

void drop(Hold &hold) {
  if (hold.shared != nullptr) munmap(hold.shared, sizeof(Shared));
  if (hold.fd >= 0) close(hold.fd);
  hold = Hold{};
}

void wait_reached(const Shared &shared) {
  // Another process reaches the record: nothing here can be notified, so poll.
  const uint64_t target = shared.recorded.load();
  while (shared.reached.load() < target) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace simcuda::ipc_events
