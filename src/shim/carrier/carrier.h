// The host carrier: where the bytes of every tracked allocation this process created wait
// while the native checkpoint runs (DESIGN.md, "Host carrier"; DRIVER-FACTS F3-F6: a
// POSIX-capable allocation that goes through native checkpoint can never be exported again,
// and an importer's native restore fails, so these bytes must leave the driver first).
//
// One anonymous host arena per process, grown only and reused across cycles: providing host
// memory costs far more than copying into it (DRIVER-FACTS "Speeds": 16 GiB takes 6-11 s to
// provide, 0.31 s to copy). The arena is registered with the driver (cuMemHostRegister) only
// while bytes move and unregistered before the native checkpoint, which is much slower on a
// process that holds pinned memory (same section). The bytes stay in process memory, so a
// CRIU dump of the process carries them.
//
// Copies run per context on one stream each, asynchronously, all contexts enqueued before
// any is synchronized, so devices copy at once; one synchronize per context.
#pragma once

#include <cstddef>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/error.h"
#include "shim/intercept/cuda_abi.h"
#include "shim/intercept/driver_api.h"

namespace cusnap::shim {

/// One allocation travelling through the carrier.
struct CarrierSlot {
  CUmemGenericAllocationHandle handle = 0;  ///< real driver handle: source (save) or target
  size_t size = 0;                          ///< allocation size in bytes
  CUcontext context = nullptr;              ///< the context its copies run in
  CUdevice device = 0;                      ///< that context's device: gets RW access to
                                            ///< the carrier's own staging mapping
};

/// What one save or load moved: bytes and elapsed ns, split into the phases the CLI prints.
struct CarrierTransfer {
  uint64_t bytes = 0;         ///< bytes copied
  uint64_t ns = 0;            ///< whole operation (provision + register + copy + unregister)
  uint64_t provision_ns = 0;  ///< growing and first-touching the arena
  uint64_t register_ns = 0;   ///< cuMemHostRegister + cuMemHostUnregister
  uint64_t copy_ns = 0;       ///< enqueue + synchronize of every copy
};

/// When the arena is provided (CUSNAP_CARRIER, DESIGN.md "Environment").
enum class CarrierMode { kLazy, kEager };

/// CUSNAP_CARRIER: "lazy" (default) or "eager"; anything else is logged and read as lazy.
CarrierMode CarrierModeFromEnvironment();

/// The host arena and the copies into and out of it. Thread-safe (one operation at a time).
class HostCarrier {
 public:
  /// `api`: the real driver entry points (stays referenced).
  HostCarrier(const DriverApi& api, CarrierMode mode);
  ~HostCarrier();
  HostCarrier(const HostCarrier&) = delete;
  HostCarrier& operator=(const HostCarrier&) = delete;

  /// Grows the arena to at least `bytes` and touches every new page, so that later copies
  /// never wait for the kernel to provide memory. Never shrinks; keeps what it held.
  /// Errors: ENOMEM (errno-coded) naming the size.
  Status Provision(size_t bytes);

  /// Eager mode: tracked allocations now total `tracked_bytes`; a background thread grows
  /// the arena to that size while the job runs. Lazy mode: nothing. Never blocks on the
  /// growth itself.
  void Anticipate(size_t tracked_bytes);

  /// Copies every slot's allocation into the arena (device to host), in order, through a
  /// staging mapping of each handle that the carrier makes and removes itself (the
  /// application's mappings may lack access for the copying device, or not exist). On
  /// failure every enqueued copy is synchronized before the error returns. Errors carry the
  /// CUresult and name the slot's handle and size.
  Result<CarrierTransfer> Save(std::span<const CarrierSlot> slots);

  /// Copies the bytes of the last Save back (host to device) into each slot's (fresh)
  /// allocation. The slots must have the sizes, in order, that Save saw; else
  /// CUDA_ERROR_INVALID_VALUE and nothing moves. A failed Load keeps the saved bytes (the
  /// host side is only read), so it can be run again; a failed Save forgets them (they may
  /// be incomplete) and Load refuses until a Save succeeds.
  Result<CarrierTransfer> Load(std::span<const CarrierSlot> slots);

  /// Forgets the saved layout (after a refused or finished cycle); the arena stays.
  void Discard();

  CarrierMode mode() const { return mode_; }
  /// Bytes the arena holds (grown, touched).
  size_t capacity() const;
  /// Bytes the arena would still grow by to hold `bytes` (its 2 MiB steps; 0 when it holds
  /// them already): the host memory a save of `bytes` provisions.
  size_t GrowthFor(size_t bytes) const;
  /// Bytes held by the last Save (0 after Discard).
  size_t saved_bytes() const;
  /// The saved bytes of slot `index` of the last Save (empty when out of range).
  std::span<const std::byte> saved(size_t index) const;
  /// True while a copy stream's synchronize failed and has not succeeded since: the device
  /// may still use the arena, so it is not moved or freed (SPEC-REFERENCE K.3 #12). The next
  /// Save/Load synchronizes those streams again first (and unregisters the arena when an
  /// earlier unregister failed); it fails, changing nothing, while that still fails.
  bool poisoned() const;

 private:
  struct Placement {
    size_t offset;
    size_t size;
  };
  enum class Direction { kToHost, kToDevice };

  // The staging mapping of one slot: a VA range of the carrier's own with the slot's handle
  // mapped and RW access for the copying device.
  struct Staging {
    CUdeviceptr va = 0;
    size_t size = 0;
    bool reserved = false;
    bool mapped = false;
  };
  // A copy stream whose synchronize failed, kept with the staging mappings its copies use
  // until a synchronize succeeds (unmapping under a running copy would fault it).
  struct Unsynced {
    CUcontext context = nullptr;
    CUstream stream = nullptr;
    std::vector<Staging> staging;
  };

  Status GrowLocked(size_t bytes, uint64_t* provision_ns);
  // What a failed earlier transfer left: synchronizes its streams again, then unregisters
  // the arena if it is still registered. Errors carry the CUresult; nothing moves then.
  Status SettleLocked();
  // Unmaps and frees staging ranges; the caller has entered their context.
  void RemoveStaging(std::span<const Staging> staging);
  // cuMemHostUnregister of the arena in `context`; clears registered_ on success.
  CUresult UnregisterLocked(CUcontext context);
  Result<CarrierTransfer> MoveLocked(std::span<const CarrierSlot> slots, Direction direction);
  void BackgroundGrowth();

  const DriverApi& api_;
  const CarrierMode mode_;
  mutable std::mutex mutex_;  // arena, layout, unsynced_, registered_
  std::byte* arena_ = nullptr;
  size_t capacity_ = 0;
  std::vector<Placement> layout_;
  std::vector<Unsynced> unsynced_;
  // The arena is registered with the driver (between register and a successful
  // unregister), from registered_context_.
  bool registered_ = false;
  CUcontext registered_context_ = nullptr;
  // Eager growth: the size asked for, and the thread that provides it. Separate from
  // mutex_ so that Anticipate never waits for a growth in progress.
  std::atomic<size_t> wanted_{0};
  std::mutex growth_mutex_;
  std::condition_variable growth_cv_;  // wanted_ rose, or stopping_
  bool stopping_ = false;              // guarded by growth_mutex_
  std::thread growth_thread_;          // started at the first Anticipate in eager mode
};

}  // namespace cusnap::shim
