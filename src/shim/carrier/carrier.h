// The host carrier: where the bytes of every tracked allocation this process created wait
// while the native checkpoint runs (DESIGN.md, "Host carrier"; DRIVER-FACTS F3-F6: a
// POSIX-capable allocation that goes through native checkpoint can never be exported again,
// and an importer's native restore fails, so these bytes must leave the driver first).
//
// One host arena per process on transparent huge pages, provided by several threads, grown
// only and reused across cycles (host_arena.h): providing host memory costs far more than
// copying into it (DRIVER-FACTS "Host memory for a carrier"). Bytes move in chunks; the
// arena is registered piece by piece just ahead of the copies (chunk_pinner.h) and kept
// registered (the default), or unregistered behind the copies (pipelined), or registered
// around the whole transfer (carrier_options.h: measured, docs/MEASURED.md M11, M21). A
// growing arena is touched in the background while the first pieces are registered and
// copied. Chunks of device memory that
// hold only zeros are found by a device-side scan (zero_scan.h), not copied, and recreated
// with a memset. The bytes stay in process memory, so a CRIU dump of the process carries
// them; `cusnap dump` instead has them written beside CRIU's images on several threads and
// the arena given back (WriteFile, ReadFile; carrier_file.h).
//
// Copies run per context on one stream each, asynchronously; chunks of every context are
// enqueued in turn, so devices copy at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <pthread.h>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/unique_fd.h"
#include "shim/carrier/carrier_options.h"
#include "shim/carrier/carrier_file.h"
#include "shim/carrier/host_arena.h"
#include "shim/carrier/zero_scan.h"
#include "shim/driver/cuda_abi.h"
#include "shim/driver/driver_api.h"

namespace cusnap::shim {

struct CopyGroup;  // one context's share of a transfer (carrier_transfer.h)

/// One allocation travelling through the carrier.
struct CarrierSlot {
  CUmemGenericAllocationHandle handle = 0;  ///< real driver handle: source (save) or target
  size_t size = 0;                          ///< allocation size in bytes
  CUcontext context = nullptr;              ///< the context its copies run in
  CUdevice device = 0;                      ///< that context's device: gets RW access to
                                            ///< the carrier's own staging mapping
  bool scan = true;  ///< device memory: scanned for zero chunks (HOST_NUMA is not: reading
                     ///< it from the device costs as much as copying it)
};

/// What one save or load moved: bytes and elapsed ns, split into the phases the CLI prints.
struct CarrierTransfer {
  uint64_t bytes = 0;         ///< bytes carried (copied + zero_bytes)
  uint64_t zero_bytes = 0;    ///< bytes of all-zero chunks: not copied (memset at load)
  uint64_t chunks = 0;        ///< chunks copied
  uint64_t scan_ns = 0;       ///< the zero-chunk scan (save)
  uint64_t ns = 0;            ///< whole operation (provision + register + copy + unregister)
  uint64_t provision_ns = 0;  ///< growing and first-touching the arena
  uint64_t register_ns = 0;   ///< time inside cuMemHostRegister + cuMemHostUnregister
                              ///< (pipelined: overlaps copy_ns)
  uint64_t copy_ns = 0;       ///< first enqueue to last synchronize of the copies
};

/// The host arena and the copies into and out of it. Thread-safe (one operation at a time).
class HostCarrier {
 public:
  /// `api`: the real driver entry points (stays referenced).
  HostCarrier(const DriverApi& api, const CarrierOptions& options);
  /// Default options but `mode`.
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
  /// application's mappings may lack access for the copying device, or not exist). Chunks
  /// the zero scan finds all-zero are not copied. On failure every enqueued copy is
  /// synchronized before the error returns. Errors carry the CUresult and name the slot's
  /// handle and size, and the chunk's byte range when one chunk failed.
  /// With `stem_path` ("<dir>/<stem>", a dump): no arena; the bytes stream from the device
  /// through a few pinned buffers (options.ring_bytes) straight into the part files WriteFile
  /// would write, digested as written (a write's errors as WriteParts', every part removed).
  Result<CarrierTransfer> Save(std::span<const CarrierSlot> slots, const std::string& stem_path = "");

  /// Copies the bytes of the last Save back (host to device) into each slot's (fresh)
  /// allocation. The slots must have the sizes, in order, that Save saw; else
  /// CUDA_ERROR_INVALID_VALUE and nothing moves. Bytes a dump wrote to files (WriteFile) and
  /// ReadFile found are streamed from the files through a few pinned buffers
  /// (options.ring_bytes) straight to the device, each unit checked against its digest as it
  /// is read: one pass, no arena (a file error is named as ReadParts names it, EBADMSG for
  /// a corrupt unit). A failed Load keeps the saved bytes (the host side, memory or files, is
  /// only read), so it can be run again; a failed Save forgets them (they may be incomplete)
  /// and Load refuses until a Save succeeds.
  Result<CarrierTransfer> Load(std::span<const CarrierSlot> slots);

  /// kWriteCarrier (`cusnap dump`, after kRelease): writes the bytes of the last Save into
  /// part files "<stem>-<k>.bin" beside `stem_path` ("<dir>/<stem>"), one thread each
  /// (carrier_file.h; all-zero chunks stay holes), unregisters the arena and gives it back
  /// to the kernel, so CRIU dumps none of it. Until ReadFile, Load refuses, naming the files.
  /// A Save to the same stem wrote them already: only the arena goes then.
  /// Errors: CUDA_ERROR_INVALID_VALUE when nothing is saved or a copy may still be running;
  /// the write's (errno-coded; nothing changed, the part files are removed); an
  /// unregister's CUresult (the bytes stay in memory too).
  Result<CarrierTransfer> WriteFile(const std::string& stem_path);

  /// kReadCarrier: finds the part files WriteFile wrote in `dir` now ("": where they were
  /// written), each opened and of the size written; Load then streams them to the device.
  /// Nothing (0 bytes) while the saved bytes are in memory; else `bytes` are the saved bytes,
  /// zero_bytes the holes among them. Errors: errno-coded naming the file (ENOENT, EINVAL for
  /// a size other than written): the bytes stay in the files and it can be run again.
  Result<CarrierTransfer> ReadFile(const std::string& dir);

  /// The names of the part files the saved bytes are in, joined by ", " ("" while they are
  /// in memory).
  std::string file_name() const;
  /// The part files the saved bytes are in, with each chunk's digest (empty while they are
  /// in memory).
  std::vector<FilePart> file_parts() const;
  /// Ok while Load can reach the saved bytes (in memory, or in files ReadFile found); else the
  /// error Load answers (CUDA_ERROR_INVALID_VALUE naming the files): a reallocate checks it
  /// before it rebuilds anything.
  Status SavedBytesReadable() const;

  /// Forgets the saved layout (after a refused or finished cycle); the arena stays, up to
  /// options.keep_bytes (CUSNAP_CARRIER_KEEP): the rest goes back to the kernel.
  void Discard();

  CarrierMode mode() const { return options_.mode; }
  const CarrierOptions& options() const { return options_; }
  /// Bytes the arena holds (grown, touched).
  size_t capacity() const;
  /// Bytes the arena would still grow by to hold `bytes` (its 2 MiB steps; 0 when it holds
  /// them already): the host memory a save of `bytes` provisions.
  size_t GrowthFor(size_t bytes) const;
  /// Bytes held by the last Save (0 after Discard).
  size_t saved_bytes() const;
  /// The saved bytes of slot `index` of the last Save (empty when out of range). Chunks
  /// found all-zero are not in it (saved_zero tells which).
  std::span<const std::byte> saved(size_t index) const;
  /// True when the chunk of slot `index` holding byte `offset` was found all-zero by the
  /// last Save (its bytes in saved() are then stale).
  bool saved_zero(size_t index, size_t offset) const;
  /// True while the arena is registered with the driver (kept pinning, or a failed
  /// unregister not yet retried).
  bool registered() const;
  /// True while a copy stream's synchronize failed and has not succeeded since: the device
  /// may still use the arena, so it is not moved or freed (SPEC-REFERENCE K.3 #12). The next
  /// Save/Load synchronizes those streams again first (and unregisters the arena when an
  /// earlier unregister failed); it fails, changing nothing, while that still fails.
  bool poisoned() const;

 private:
  struct Placement {
    size_t offset;
    size_t size;
    std::vector<char> zero;  // per chunk of options_.chunk_bytes: all-zero at Save
  };
  enum class Direction { kToHost, kToDevice };
  struct Transfer;      // one MoveLocked's working state (carrier.cc)
  class DeviceStream;  // a Load's streamed copies from the files (carrier_stream.cc)

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

  // Grows the arena to `bytes`; `background`: the new pages are touched while the transfer
  // goes on (the pinner waits for each piece's pages before registering it).
  Status GrowLocked(size_t bytes, uint64_t* provision_ns, bool background = false);
  // What a failed earlier transfer left: synchronizes its streams again, then unregisters
  // what is still registered (but a whole kept registration). Errors carry the CUresult.
  Status SettleLocked();
  // Unmaps and frees staging ranges; the caller has entered their context.
  void RemoveStaging(std::span<const Staging> staging);
  // Registers [begin, begin + bytes) in `context`; remembered until UnregisterLocked.
  CUresult RegisterLocked(CUcontext context, std::byte* begin, size_t bytes, uint64_t* ns);
  // Unregisters the registration starting at `begin`; forgets it on success.
  CUresult UnregisterLocked(std::byte* begin, uint64_t* ns);
  // Unregisters every registration; the first failure's result.
  CUresult UnregisterAllLocked(uint64_t* ns);
  // `stem_path`: a Save streamed to files (Save's).
  Result<CarrierTransfer> MoveLocked(std::span<const CarrierSlot> slots, Direction direction,
                                     const std::string& stem_path = "");
  // The saved bytes' ranges that are not all zero, at their arena offsets in the file.
  std::vector<FilePiece> FilePiecesLocked() const;
  // Bytes from the arena's start to the end of the last saved slot.
  size_t LayoutEndLocked() const;
  // saved_bytes, mutex_ held.
  size_t SavedBytesLocked() const;
  // What a WriteFile or ReadFile of `pieces` carried: the saved bytes, of them the holes.
  CarrierTransfer FileTransferLocked(const std::vector<FilePiece>& pieces) const;
  // Bytes one file read or write moves at most: a chunk, at most kFileUnit.
  size_t FileUnitBytes() const { return std::min(options_.chunk_bytes, kFileUnit); }
  // Bytes of each streamed transfer's buffer: kStreamBuffer, at most a unit and the ring.
  size_t StreamBufferBytes() const {
    return std::min({kStreamBuffer, FileUnitBytes(), options_.ring_bytes});
  }
  // SavedBytesReadable, mutex_ held.
  Status ReadableLocked() const;
  // file_name, mutex_ held.
  std::string FileNamesLocked() const;
  // Zero scan of every scannable slot of the transfer (save): fills layout_[i].zero.
  Status ScanLocked(Transfer& t);
  // Enqueues the chunks (pinning them per options_), then synchronizes every stream.
  void CopyLocked(Transfer& t);
  // Load from the files ReadFile found (carrier_stream.cc): zero chunks memset, the rest
  // read, checked and copied by the I/O threads, then every stream synchronized.
  void StreamFromFilesLocked(Transfer& t);
  // Save into part files "<stem_path>-<k>.bin" (carrier_stream.cc): the non-zero chunks
  // copied from the device and written by the I/O threads; file_parts_ set on success.
  void StreamToFilesLocked(Transfer& t, const std::string& stem_path);
  // Counts every slot's bytes and zero chunks into t.result, calling `each(group, slot,
  // offset, bytes)` for each zero chunk.
  void ForEachZeroChunk(Transfer& t, const std::function<void(CopyGroup&, size_t, size_t, size_t)>& each);
  // I/O threads of a streamed transfer: options_.ring_bytes in units, 1 to provision_threads.
  unsigned StreamThreads() const;
  // One synchronize per group stream, even after a failure; a failed one keeps the stream
  // and its staging mappings (unsynced_). True when every one succeeded.
  bool SynchronizeLocked(Transfer& t);
  void BackgroundGrowth();

  const DriverApi& api_;
  const CarrierOptions options_;
  mutable std::mutex mutex_;  // arena_, layout_, unsynced_, registrations_, scanner_
  HostArena arena_;
  ZeroScanner scanner_;
  std::vector<Placement> layout_;
  std::vector<Unsynced> unsynced_;
  // Host ranges registered with the driver (between register and a successful unregister),
  // each with the context it was registered from.
  struct Registration {
    std::byte* begin = nullptr;
    CUcontext context = nullptr;
  };
  std::vector<Registration> registrations_;
  // Kept pinning: registrations_ cover the whole arena (every piece was registered).
  bool arena_pinned_ = false;
  // WriteFile wrote the saved bytes to these part files and gave the arena back: empty while
  // they are in memory. file_dir_: where they were written (ReadFile may be told another).
  std::vector<FilePart> file_parts_;
  std::string file_dir_;
  // ReadFile found file_parts_ in file_dir_: Load streams them from there. A folder ReadFile
  // reached through a descriptor that ends with its step (/proc/self/fd/<n>) is held open
  // until the reallocate that reads the files (files_folder_, file_dir_ its path).
  bool files_found_ = false;
  UniqueFd files_folder_;
  // Eager growth: the size asked for, and the thread that provides it. Separate from
  // mutex_ so that Anticipate never waits for a growth in progress.
  std::atomic<size_t> wanted_{0};
  std::mutex growth_mutex_;
  std::condition_variable growth_cv_;  // wanted_ rose, or stopping_
  bool stopping_ = false;              // guarded by growth_mutex_
  pthread_t growth_thread_{};          // started at the first Anticipate in eager mode
  bool growth_started_ = false;        // growth_mutex_
};

}  // namespace cusnap::shim
