// Pipelined pinning on two threads (chunk_pinner.h).
#include "shim/carrier/chunk_pinner.h"

#include "common/clock.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {
ChunkPinner::ChunkPinner(const DriverApi& api, std::vector<Piece> pieces, Mode mode, BeforeRegister before)
    : api_(api), pieces_(std::move(pieces)), mode_(mode), before_(std::move(before)),
      registered_(pieces_.size(), 0) {
  auto pin = [](void* self) -> void* {
    static_cast<ChunkPinner*>(self)->PinLoop();
    return nullptr;
  };
  auto unpin = [](void* self) -> void* {
    static_cast<ChunkPinner*>(self)->UnpinLoop();
    return nullptr;
  };
  // Without a thread of its own, the pinner registers every piece here, before any copy;
  // pieces no thread unpins stay registered and the caller unregisters them (still_registered).
  pin_started_ = StartQuietThread(&pin_thread_, pin, this);
  if (!pin_started_) PinLoop();
  if (mode_ == Mode::kUnpinBehind) unpin_started_ = StartQuietThread(&unpin_thread_, unpin, this);
}

ChunkPinner::~ChunkPinner() { Finish(); }

void ChunkPinner::FailLocked(CUresult r, const char* action, size_t piece) {
  if (outcome_.result != CUDA_SUCCESS) return;
  outcome_.result = r;
  outcome_.action = action;
  outcome_.piece = piece;
}

void ChunkPinner::PinLoop() {
  CUcontext current = nullptr;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    {
      std::lock_guard lock(mutex_);
      if ((stopping_ && mode_ == Mode::kUnpinBehind) || outcome_.result != CUDA_SUCCESS) break;
    }
    const Piece& piece = pieces_[k];
    CUresult r = CUDA_SUCCESS;
    if (piece.context != current) {
      r = api_.cuCtxSetCurrent(piece.context);
      if (r == CUDA_SUCCESS) current = piece.context;
    }
    if (before_) before_(piece);
    const uint64_t start = MonotonicNs();
    if (r == CUDA_SUCCESS) r = api_.cuMemHostRegister_v2(piece.begin, piece.bytes, CU_MEMHOSTREGISTER_PORTABLE);
    const uint64_t took = MonotonicNs() - start;
    std::lock_guard lock(mutex_);
    outcome_.register_ns += took;
    if (r == CUDA_SUCCESS) {
      registered_[k] = 1;
    } else {
      FailLocked(r, "registering the arena's", k);
    }
    pinned_ = k + 1;
    changed_.notify_all();
    if (r != CUDA_SUCCESS) break;
  }
  std::lock_guard lock(mutex_);
  pinned_ = pieces_.size();  // nothing more comes: waiters see what was registered
  changed_.notify_all();
}

CUresult ChunkPinner::WaitPinned(size_t k) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return pinned_ > k; });
  if (registered_[k]) return CUDA_SUCCESS;
  return outcome_.result != CUDA_SUCCESS ? outcome_.result : CUDA_ERROR_NOT_READY;
}

void ChunkPinner::Unpin(size_t k, CUevent done) {
  std::lock_guard lock(mutex_);
  to_unpin_.emplace_back(k, done);
  changed_.notify_all();
}

void ChunkPinner::UnpinLoop() {
  CUcontext current = nullptr;
  for (;;) {
    std::pair<size_t, CUevent> next;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !to_unpin_.empty() || stopping_; });
      if (to_unpin_.empty()) return;  // stopping, and every handed piece is done
      next = to_unpin_.front();
    }
    const auto [k, done] = next;
    const Piece& piece = pieces_[k];
    CUresult r = CUDA_SUCCESS;
    if (piece.context != current) {
      r = api_.cuCtxSetCurrent(piece.context);
      if (r == CUDA_SUCCESS) current = piece.context;
    }
    if (r == CUDA_SUCCESS) r = api_.cuEventSynchronize(done);
    if (r != CUDA_SUCCESS) {
      // Completion unknown: this piece and every later one stay registered (and their events
      // alive) until the caller's streams are synchronized.
      std::lock_guard lock(mutex_);
      FailLocked(r, "waiting for the copy of the arena's", k);
      return;
    }
    api_.cuEventDestroy_v2(done);
    const uint64_t start = MonotonicNs();
    r = api_.cuMemHostUnregister(piece.begin);
    const uint64_t took = MonotonicNs() - start;
    std::lock_guard lock(mutex_);
    to_unpin_.pop_front();
    outcome_.register_ns += took;
    if (r != CUDA_SUCCESS) {
      FailLocked(r, "unregistering the arena's", k);
      return;
    }
    registered_[k] = 0;
  }
}

ChunkPinner::Outcome ChunkPinner::Finish() {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return outcome_;
    finished_ = true;
    stopping_ = true;
    changed_.notify_all();
  }
  if (pin_started_) pthread_join(pin_thread_, nullptr);
  if (unpin_started_) pthread_join(unpin_thread_, nullptr);
  // Events of pieces the unpinning thread did not reach (it stopped at a failure).
  for (const auto& [k, done] : to_unpin_) api_.cuEventDestroy_v2(done);
  to_unpin_.clear();
  outcome_.still_registered.clear();
  for (size_t k = 0; k < registered_.size(); ++k) {
    if (registered_[k]) outcome_.still_registered.push_back(k);
  }
  return outcome_;
}

}  // namespace cusnap::shim
