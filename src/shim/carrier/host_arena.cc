// The carrier's host arena (host_arena.h).
#include "shim/carrier/host_arena.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

size_t RoundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// Below this a second thread costs more than it saves.
constexpr size_t kTouchShareMin = size_t{64} << 20;

struct TouchShare {
  std::byte* begin = nullptr;
  size_t bytes = 0;
};

void TouchOne(std::byte* begin, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t at = 0; at < bytes; at += page) {
    *reinterpret_cast<volatile unsigned char*>(begin + at) = 0;
  }
}

void* TouchThread(void* argument) {
  const auto* share = static_cast<const TouchShare*>(argument);
  TouchOne(share->begin, share->bytes);
  return nullptr;
}

// A fresh anonymous mapping of `bytes` whose start is 2 MiB aligned (so that every step can
// be one huge page), or nullptr with errno set.
std::byte* MapAligned(size_t bytes) {
  void* raw = mmap(nullptr, bytes + kArenaStep, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(start, kArenaStep);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = (start + bytes + kArenaStep) - (aligned + bytes);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<std::byte*>(aligned);
}

}  // namespace

void TouchPages(std::byte* begin, size_t bytes, unsigned threads) {
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  while (threads > 1 && bytes / threads < kTouchShareMin) --threads;
  const size_t share = RoundUp((bytes + threads - 1) / threads, kArenaStep);
  TouchShare shares[64];
  pthread_t ids[64];
  bool started[64] = {};
  for (unsigned i = 1; i < threads; ++i) {
    const size_t at = share * i;
    if (at >= bytes) break;
    shares[i] = TouchShare{begin + at, bytes - at < share ? bytes - at : share};
    started[i] = StartQuietThread(&ids[i], TouchThread, &shares[i]);
  }
  TouchOne(begin, bytes < share ? bytes : share);
  for (unsigned i = 1; i < threads; ++i) {
    if (share * i >= bytes) break;
    if (started[i]) {
      pthread_join(ids[i], nullptr);
    } else {
      TouchOne(shares[i].begin, shares[i].bytes);
    }
  }
}

BackgroundTouch::BackgroundTouch(std::byte* begin, size_t bytes, unsigned threads)
    : begin_(begin), bytes_(bytes), done_((bytes + kTouchUnit - 1) / kTouchUnit, 0) {
  threads = std::clamp(threads, 1u, 64u);
  if (threads > done_.size()) threads = static_cast<unsigned>(done_.size());
  auto work = [](void* self) -> void* {
    static_cast<BackgroundTouch*>(self)->Work();
    return nullptr;
  };
  for (unsigned i = 0; i < threads; ++i) {
    pthread_t id;
    if (!StartQuietThread(&id, work, this)) break;  // fewer threads
    threads_.push_back(id);
  }
  if (threads_.empty()) Work();
}

BackgroundTouch::~BackgroundTouch() {
  for (pthread_t id : threads_) pthread_join(id, nullptr);
}

void BackgroundTouch::Work() {
  for (;;) {
    size_t unit = 0;
    {
      std::lock_guard lock(mutex_);
      if (next_unit_ == done_.size()) return;
      unit = next_unit_++;
    }
    const size_t at = unit * kTouchUnit;
    TouchOne(begin_ + at, bytes_ - at < kTouchUnit ? bytes_ - at : kTouchUnit);
    std::lock_guard lock(mutex_);
    done_[unit] = 1;
    touched_.notify_all();
  }
}

void BackgroundTouch::WaitTouched(const std::byte* at, size_t bytes) {
  const std::byte* end = at + bytes;
  if (end <= begin_ || at >= begin_ + bytes_ || bytes == 0) return;
  const size_t first = at < begin_ ? 0 : static_cast<size_t>(at - begin_) / kTouchUnit;
  const std::byte* stop = std::min<const std::byte*>(end, begin_ + bytes_);
  const size_t last = static_cast<size_t>(stop - begin_ - 1) / kTouchUnit;
  std::unique_lock lock(mutex_);
  touched_.wait(lock, [&] {
    for (size_t u = first; u <= last; ++u) {
      if (!done_[u]) return false;
    }
    return true;
  });
}

HostArena::~HostArena() {
  FinishTouching();
  if (data_ != nullptr) munmap(data_, capacity_);
}

Result<size_t> HostArena::MapMore(size_t bytes) {
  FinishTouching();  // mremap may move the pages the touch threads write
  const size_t wanted = RoundUp(bytes, kArenaStep);
  size_t fresh_from = capacity_;
  void* grown = capacity_ == 0 ? MAP_FAILED : mremap(data_, capacity_, wanted, 0);  // in place
  if (grown == MAP_FAILED) {
    std::byte* mapped = MapAligned(wanted);
    if (mapped == nullptr) {
      const int error = errno;
      return Error{error, ThisProcess() + ": host carrier: cannot grow the host arena from " +
                              std::to_string(capacity_) + " to " + std::to_string(wanted) +
                              " bytes: " + strerror(error)};
    }
    if (data_ != nullptr) munmap(data_, capacity_);
    data_ = mapped;
    fresh_from = 0;
  }
  // Advice only: where THP is off the arena still works, on 4 KiB pages.
  if (madvise(data_ + fresh_from, wanted - fresh_from, MADV_HUGEPAGE) != 0) {
    CUSNAP_LOG_INFO("host carrier: madvise(MADV_HUGEPAGE) failed: %s", strerror(errno));
  }
  capacity_ = wanted;
  return fresh_from;
}

Status HostArena::Grow(size_t bytes, unsigned threads) {
  if (bytes <= capacity_) return Ok{};
  Result<size_t> fresh = MapMore(bytes);
  if (!fresh) return fresh.error();
  TouchPages(data_ + *fresh, capacity_ - *fresh, threads);
  return Ok{};
}

Status HostArena::GrowInBackground(size_t bytes, unsigned threads) {
  if (bytes <= capacity_) return Ok{};
  Result<size_t> fresh = MapMore(bytes);
  if (!fresh) return fresh.error();
  touch_ = std::make_unique<BackgroundTouch>(data_ + *fresh, capacity_ - *fresh, threads);
  return Ok{};
}

void HostArena::WaitTouched(const std::byte* at, size_t bytes) {
  if (touch_) touch_->WaitTouched(at, bytes);
}

uint64_t HostArena::FinishTouching() {
  if (!touch_) return 0;
  const uint64_t start = MonotonicNs();
  touch_.reset();
  return MonotonicNs() - start;
}

void HostArena::ShrinkTo(size_t bytes) {
  FinishTouching();
  const size_t keep = RoundUp(bytes, kArenaStep);
  if (keep >= capacity_) return;
  munmap(data_ + keep, capacity_ - keep);
  capacity_ = keep;
  if (keep == 0) data_ = nullptr;
}

void HostArena::Abandon() {
  FinishTouching();
  data_ = nullptr;
  capacity_ = 0;
}

}  // namespace cusnap::shim
