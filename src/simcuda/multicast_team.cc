// The shared team record of a multicast object (multicast_team.h).
#include "multicast_team.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

namespace simcuda::multicast::team {
namespace {

constexpr uint32_t kMagic = 0x534d4354;  // "SMCT"
constexpr uint32_t kVersion = 1;
constexpr char kNamePrefix[] = "simcuda-mcast:";

Record *map_record(int fd) {
  void *p = mmap(nullptr, sizeof(Record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Record *>(p);
}

// Shared futex operations (not FUTEX_PRIVATE: the word lives in memory shared across processes).
void futex_wait(std::atomic<uint32_t> *word, uint32_t expected, const timespec *timeout) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT, expected, timeout, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t> *word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

int create(uint64_t id, const CUmulticastObjectProp &prop, size_t capacity, Record **record) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%016" PRIx64, kNamePrefix, id);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  Record *r = nullptr;
  if (ftruncate(fd, sizeof(Record)) != 0 || (r = map_record(fd)) == nullptr) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  // A fresh memfd reads as zeros: only the non-zero fields need setting.
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&r->mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  r->num_devices = prop.numDevices;
  r->id = id;
  r->size = prop.size;
  r->capacity = capacity;
  r->handle_types = prop.handleTypes;
  r->next_serial = 1;
  r->version = kVersion;
  r->magic = kMagic;
  *record = r;
  return fd;
}

uint64_t id_of(int fd) {
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) != sizeof(Record))
    return 0;
  char link[256];
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
  if (n <= 0) return 0;
  link[n] = '\0';
  const char *name = std::strstr(link, kNamePrefix);  // "/memfd:simcuda-mcast:... (deleted)"
  uint64_t id = 0;
  if (name == nullptr || std::sscanf(name + sizeof kNamePrefix - 1, "%" SCNx64, &id) != 1) return 0;
  return id;
}

Record *map(int fd) {
  uint64_t id = id_of(fd);
  if (id == 0) return nullptr;
  Record *r = map_record(fd);
  if (r == nullptr) return nullptr;
  if (r->magic != kMagic || r->version != kVersion || r->id != id) {
    unmap(r);
    return nullptr;
  }
  return r;
}

void unmap(Record *record) { munmap(record, sizeof(Record)); }

Lock::Lock(Record *record) : record_(record) {
  // EOWNERDEAD: a process died holding the lock. Every change to the record is complete
  // before it unlocks except a half-written binding slot, whose serial is written last.
  if (pthread_mutex_lock(&record_->mutex) == EOWNERDEAD) pthread_mutex_consistent(&record_->mutex);
}

Lock::~Lock() { pthread_mutex_unlock(&record_->mutex); }

unsigned devices_added(const Record &record) { return static_cast<unsigned>(std::popcount(record.device_mask)); }

void changed(Record *record) {
  record->changes.fetch_add(1);
  futex_wake_all(&record->changes);
}

bool wait_complete(Record *record, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    uint32_t seen = 0;
    {
      Lock lock(record);
      if (devices_added(*record) >= record->num_devices) return true;
      seen = record->changes.load();
    }
    auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex_wait(&record->changes, seen, &timeout);  // returns at once if a change came in between
  }
}

}  // namespace simcuda::multicast::team
