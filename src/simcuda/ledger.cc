// The cross-process memory ledger (ledger.h). The file is locked with flock for every change
// and read (held by the open file, so a process that dies never leaves it locked).
#include "ledger.h"

#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace simcuda::ledger {
namespace {

constexpr uint32_t kMagic = 0x53434c44;  // "SCLD"
constexpr uint32_t kVersion = 1;
constexpr size_t kSlots = 128;
constexpr size_t kEntriesPerSlot = 4096;

struct Entry {
  uint64_t uid;
  int32_t device;  // -1 for host memory (never counted)
  uint32_t unused;
  uint64_t bytes;
};

struct Slot {
  int32_t pid;  // 0 = free
  uint32_t count;
  uint64_t start_time;  // /proc/<pid>/stat field 22, to tell a reused pid apart
  Entry entries[kEntriesPerSlot];
};

struct File {
  uint32_t magic;
  uint32_t version;
  Slot slots[kSlots];
};

uint64_t start_time_of(int pid) {
  // read(2), not an ifstream: a process that exits between open and read makes the read
  // fail with ESRCH, which libstdc++'s filebuf throws out of a driver call (a flaky CI
  // failure, "basic_filebuf::underflow error reading the file: No such process"); a process
  // gone reads as start time 0, as a missing one does.
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return 0;
  const std::string text(buf, static_cast<size_t>(n));
  size_t close = text.rfind(')');  // the command name may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  size_t pos = close + 2;
  for (int field = 3; field < 22 && pos != std::string::npos; ++field) pos = text.find(' ', pos) + 1;
  return pos == std::string::npos ? 0 : std::stoull(text.substr(pos));
}

bool alive(const Slot &slot) {
  if (slot.pid <= 0) return false;
  if (kill(slot.pid, 0) != 0 && errno == ESRCH) return false;
  return start_time_of(slot.pid) == slot.start_time;
}

class Ledger {
 public:
  void add(uint64_t uid, int device, size_t bytes) {
    std::lock_guard lock(mutex_);
    if (!open()) return;
    FileLock file_lock(*this, LOCK_EX);
    Slot *slot = own_slot();
    if (slot == nullptr) return;
    if (slot->count < kEntriesPerSlot) {
      slot->entries[slot->count++] = Entry{uid, device, 0, bytes};
    } else if (!warned_full_) {
      warned_full_ = true;
      std::fprintf(stderr, "simcuda[%d]: more than %zu allocations; cuMemGetInfo does not count the rest\n",
                   static_cast<int>(getpid()), kEntriesPerSlot);
    }
  }

  void remove(uint64_t uid) {
    std::lock_guard lock(mutex_);
    if (!open()) return;
    FileLock file_lock(*this, LOCK_EX);
    Slot *slot = own_slot();
    if (slot == nullptr) return;
    for (uint32_t i = 0; i < slot->count; ++i) {
      if (slot->entries[i].uid != uid) continue;
      slot->entries[i] = slot->entries[--slot->count];
      return;
    }
  }

  size_t bytes_in_use(int device) {
    std::lock_guard lock(mutex_);
    if (!open()) return 0;
    FileLock file_lock(*this, LOCK_SH);
    std::set<uint64_t> seen;
    size_t total = 0;
    for (const Slot &slot : file_->slots) {
      if (!alive(slot)) continue;
      for (uint32_t i = 0; i < slot.count && i < kEntriesPerSlot; ++i) {
        const Entry &e = slot.entries[i];
        if (e.device == device && seen.insert(e.uid).second) total += e.bytes;
      }
    }
    return total;
  }

  void forget_after_fork() {
    slot_ = nullptr;  // the child claims its own slot on first use; the file mapping stays valid
  }

 private:
  struct FileLock {
    FileLock(Ledger &l, int op) : fd(l.fd_) { if (fd >= 0) while (flock(fd, op) != 0 && errno == EINTR) {} }
    ~FileLock() { if (fd >= 0) flock(fd, LOCK_UN); }
    int fd;
  };

  bool open() {
    if (file_ != nullptr) return true;
    std::string path = config().dir + "/ledger";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::fprintf(stderr, "simcuda[%d]: cannot open memory ledger %s: %s (cuMemGetInfo will not see other processes)\n",
                   static_cast<int>(getpid()), path.c_str(), std::strerror(errno));
      return false;
    }
    if (ftruncate(fd, sizeof(File)) != 0) {  // sparse; same size for every process
      ::close(fd);
      return false;
    }
    void *map = mmap(nullptr, sizeof(File), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      return false;
    }
    fd_ = fd;
    file_ = static_cast<File *>(map);
    FileLock file_lock(*this, LOCK_EX);
    if (file_->magic != kMagic || file_->version != kVersion) {
      file_->magic = kMagic;  // a fresh (zero) file, or one from another version: start over
      file_->version = kVersion;
      for (Slot &s : file_->slots) s.pid = 0;
    }
    return true;
  }

  // This process's slot, claimed on first use (caller holds the file lock).
  Slot *own_slot() {
    if (slot_ != nullptr) return slot_;
    for (Slot &s : file_->slots) {
      if (s.pid != 0 && alive(s)) continue;
      s.count = 0;
      s.pid = static_cast<int32_t>(getpid());
      s.start_time = start_time_of(s.pid);
      slot_ = &s;
      return slot_;
    }
    std::fprintf(stderr, "simcuda[%d]: memory ledger full (%zu processes); this process's memory is not counted\n",
                 static_cast<int>(getpid()), kSlots);
    return nullptr;
  }

  std::mutex mutex_;
  int fd_ = -1;
  File *file_ = nullptr;
  Slot *slot_ = nullptr;
  bool warned_full_ = false;
};

Ledger &the_ledger() {
  static Ledger *l = new Ledger;  // never destroyed
  return *l;
}

}  // namespace

void add(uint64_t uid, int device, size_t bytes) { the_ledger().add(uid, device, bytes); }
void remove(uint64_t uid) { the_ledger().remove(uid); }
size_t bytes_in_use(int device) { return the_ledger().bytes_in_use(device); }
void forget_after_fork() { the_ledger().forget_after_fork(); }

}  // namespace simcuda::ledger
