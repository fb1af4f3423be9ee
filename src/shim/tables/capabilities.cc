#include "shim/tables/capabilities.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>

#include "common/ids.h"
#include "common/log.h"

namespace cusnap::shim {
namespace {

// The key, drawn once; `key_state` 0 = not drawn, 1 = being drawn, 2 = ready. No mutex: the
// peer thread checks requests while application threads export, and a fork child redraws.
uint64_t key[2];
std::atomic<int> key_state{0};

bool ReadRandom(void* out, size_t size) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = getrandom(bytes + done, size - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == size) return true;
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  while (done < size) {
    const ssize_t n = read(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  return done == size;
}

void DrawKey() {
  if (!ReadRandom(key, sizeof key)) {
    // No randomness source at all: still unique per process, but guessable; say so.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    key[0] = static_cast<uint64_t>(now.tv_nsec) ^ (static_cast<uint64_t>(getpid()) << 32);
    key[1] = static_cast<uint64_t>(now.tv_sec) ^ reinterpret_cast<uintptr_t>(&now);
    CUSNAP_LOG_WARN("no random source (getrandom, /dev/urandom): ticket capabilities are weak");
  }
}

const uint64_t* Key() {
  int state = key_state.load(std::memory_order_acquire);
  if (state == 2) return key;
  int expected = 0;
  if (key_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    DrawKey();
    key_state.store(2, std::memory_order_release);
    return key;
  }
  while (key_state.load(std::memory_order_acquire) != 2) {
  }
  return key;
}

constexpr uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void Round() {
    v0 += v1; v1 = Rotl(v1, 13); v1 ^= v0; v0 = Rotl(v0, 32);
    v2 += v3; v3 = Rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = Rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = Rotl(v1, 17); v1 ^= v2; v2 = Rotl(v2, 32);
  }
  void Absorb(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
  uint64_t Finish(uint64_t mark) {
    v2 ^= mark;
    for (int i = 0; i < 4; ++i) Round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

// SipHash-2-4 with 128-bit output (Aumasson & Bernstein's reference, siphash.c with
// cOUTLEN 16) of the 16-byte message (kind, local_id) under the 128-bit key: a keyed PRF, so
// capabilities of other objects tell nothing about this one's.
proto::Capability SipHash128(uint64_t k0, uint64_t k1, uint64_t m0, uint64_t m1) {
  SipState s{0x736f6d6570736575ULL ^ k0, 0x646f72616e646f6dULL ^ k1 ^ 0xee,
             0x6c7967656e657261ULL ^ k0, 0x7465646279746573ULL ^ k1};
  s.Absorb(m0);
  s.Absorb(m1);
  s.Absorb(uint64_t{16} << 56);  // the length byte, no tail bytes
  const uint64_t lo = s.Finish(0xee);
  s.v1 ^= 0xdd;
  for (int i = 0; i < 4; ++i) s.Round();
  const uint64_t hi = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  return proto::Capability{{lo, hi}};
}

}  // namespace

proto::Capability CapabilityOf(TicketKind kind, uint64_t local_id) {
  const uint64_t* k = Key();
  proto::Capability a = SipHash128(k[0], k[1], static_cast<uint64_t>(kind), local_id);
  if (a.word[0] == 0 && a.word[1] == 0) a.word[0] = 1;  // zero means "none" in a ticket
  return a;
}

bool IsCapabilityOf(const proto::Capability& capability, TicketKind kind, uint64_t local_id) {
  return SameCapability(capability, CapabilityOf(kind, local_id));
}

void RenewCapabilityKeyAfterFork() {
  DrawKey();
  key_state.store(2, std::memory_order_release);
}

}  // namespace cusnap::shim
