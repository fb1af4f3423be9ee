// Piece-by-piece pinning of the carrier's arena on threads of the pinner's own: each chunk is
// registered with the driver ahead of its copy, so copies start before the whole arena is
// registered, and (pipelined pinning) unregistered behind it once its copy completed. Kept
// pinning registers its first cycle this way and keeps every piece; it is the default, as
// registering beside a copy slows the copy about 3x on an H200 (docs/MEASURED.md M21).
// Pipelined: nothing stays registered after a transfer, so the native checkpoint that follows
// does not pay for pinned host memory (DRIVER-FACTS "Host memory for a carrier": +0.27 /
// +0.41 s per registered 16 GiB on checkpoint / restore). The pinning thread waits for each
// piece's pages to be touched (BeforeRegister): registering untouched memory provides it at
// 2.3 GB/s, against 31 GB/s for the arena's touch threads (M21).
#pragma once

#include <pthread.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "shim/driver/cuda_abi.h"
#include "shim/driver/driver_api.h"

namespace cusnap::shim {

/// The two pinning threads of one transfer. Pieces are pinned in the order given, as fast as
/// the driver allows; a piece is unpinned once the event recorded after its copy completed.
class ChunkPinner {
 public:
  /// One piece of host memory to pin: registered from `context` (PORTABLE), `bytes` a
  /// multiple of the page size.
  struct Piece {
    CUcontext context = nullptr;
    std::byte* begin = nullptr;
    size_t bytes = 0;
  };

  /// What the pinner did, once Finish returned.
  struct Outcome {
    CUresult result = CUDA_SUCCESS;  ///< the first failure (register, event wait, unregister)
    /// What failed, to be followed by the piece's description: "registering the arena's",
    /// "waiting for the copy of the arena's" or "unregistering the arena's"; empty on success.
    std::string action;
    size_t piece = 0;                ///< the piece that failed
    uint64_t register_ns = 0;        ///< time inside cuMemHostRegister + cuMemHostUnregister
    /// Pieces still registered (a failure stopped the unpinning, or they were never handed
    /// to Unpin): the caller unregisters them once its streams are synchronized.
    std::vector<size_t> still_registered;
  };

  /// Called on the pinning thread before a piece is registered: blocks until its pages are
  /// provided (HostArena::WaitTouched), so that registration does not fault them in itself.
  using BeforeRegister = std::function<void(const Piece&)>;

  /// Whether pieces are unpinned behind the copies.
  enum class Mode {
    kUnpinBehind,  ///< pipelined pinning: Unpin hands each piece back once copied
    kKeep,         ///< kept pinning: every piece is registered, even past the copies, and
                   ///< stays registered (Finish waits for the last one)
  };

  /// Starts pinning `pieces` (the application's signals are blocked on the pinner's threads).
  ChunkPinner(const DriverApi& api, std::vector<Piece> pieces, Mode mode, BeforeRegister before = {});
  /// Finish, if the caller did not.
  ~ChunkPinner();
  ChunkPinner(const ChunkPinner&) = delete;
  ChunkPinner& operator=(const ChunkPinner&) = delete;

  /// Waits until piece `k` is registered: CUDA_SUCCESS, or the CUresult with which pinning
  /// stopped (at `k` or before it: then `k` is never registered).
  CUresult WaitPinned(size_t k);

  /// Hands piece `k` (pinned) to the unpinning thread with `done`, an event recorded after
  /// the piece's last copy: that thread waits for it, unregisters the piece and destroys the
  /// event.
  void Unpin(size_t k, CUevent done);

  /// Stops pinning ahead (kKeep: waits until every piece was tried), lets the unpinning
  /// thread finish every piece handed to it, joins both threads, and says what happened.
  /// Idempotent.
  Outcome Finish();

 private:
  void PinLoop();
  void UnpinLoop();
  void FailLocked(CUresult r, const char* action, size_t piece);

  const DriverApi& api_;
  const std::vector<Piece> pieces_;
  const Mode mode_;
  const BeforeRegister before_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<char> registered_;                      // per piece
  size_t pinned_ = 0;                                 // pieces [0, pinned_) were tried
  std::deque<std::pair<size_t, CUevent>> to_unpin_;   // handed over, not yet unpinned
  bool stopping_ = false;                             // Finish began
  Outcome outcome_;
  pthread_t pin_thread_{};
  pthread_t unpin_thread_{};
  bool pin_started_ = false;
  bool unpin_started_ = false;
  bool finished_ = false;
};

}  // namespace cusnap::shim
