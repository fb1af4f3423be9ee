// The host carrier (carrier.h): the arena's growth and keeping, registration, the zero scan
// and the chunked, per-context asynchronous copies through staging mappings.
#include "shim/carrier/carrier.h"
#include "shim/carrier/carrier_transfer.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <new>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/carrier/chunk_pinner.h"
#include "shim/driver/context_scope.h"
#include "shim/quiet_thread.h"

namespace cusnap::shim {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// Times one driver call into *ns.
template <typename Call>
CUresult Timed(uint64_t* ns, Call call) {
  const uint64_t start = MonotonicNs();
  const CUresult r = call();
  *ns += MonotonicNs() - start;
  return r;
}

// One chunk of one slot: what the pipeline pins and copies as a unit.
struct Chunk {
  size_t slot = 0;
  size_t group = 0;
  size_t offset = 0;  // within the slot
  size_t bytes = 0;
};

}  // namespace

HostCarrier::HostCarrier(const DriverApi& api, const CarrierOptions& options)
    : api_(api), options_(options), scanner_(api) {}

HostCarrier::HostCarrier(const DriverApi& api, CarrierMode mode)
    : HostCarrier(api, [mode] {
        CarrierOptions options;
        options.mode = mode;
        return options;
      }()) {}

HostCarrier::~HostCarrier() {
  bool started = false;
  {
    std::lock_guard lock(growth_mutex_);
    stopping_ = true;
    started = growth_started_;
  }
  growth_cv_.notify_all();
  if (started) pthread_join(growth_thread_, nullptr);
  std::lock_guard lock(mutex_);
  // An arena with unsynchronized copies may still be written by the device: leave it mapped.
  if (!unsynced_.empty()) {
    arena_.Abandon();
    return;
  }
  uint64_t ns = 0;
  if (UnregisterAllLocked(&ns) != CUDA_SUCCESS) arena_.Abandon();
}

Status HostCarrier::Provision(size_t bytes) {
  std::lock_guard lock(mutex_);
  uint64_t ns = 0;
  return GrowLocked(bytes, &ns);
}

Status HostCarrier::GrowLocked(size_t bytes, uint64_t* provision_ns, bool background) {
  *provision_ns = 0;
  if (bytes <= arena_.capacity()) return Ok{};
  uint64_t register_ns = 0;
  // A kept registration covers the old size: it is made again for the new one.
  if (!unsynced_.empty() || UnregisterAllLocked(&register_ns) != CUDA_SUCCESS) {
    return Error{ENOMEM, ThisProcess() + ": host carrier: the arena cannot grow while the driver "
                         "may still use it (a copy of unknown completion, or still registered)"};
  }
  const uint64_t start = MonotonicNs();
  if (Status grown = background ? arena_.GrowInBackground(bytes, options_.provision_threads)
                                : arena_.Grow(bytes, options_.provision_threads);
      !grown) {
    return grown;
  }
  *provision_ns = MonotonicNs() - start;
  CUSNAP_LOG_INFO("host carrier: arena grown to %zu bytes in %llu ns", arena_.capacity(),
                  static_cast<unsigned long long>(*provision_ns));
  return Ok{};
}

void HostCarrier::Anticipate(size_t tracked_bytes) {
  if (options_.mode != CarrierMode::kEager) return;
  size_t current = wanted_.load(std::memory_order_relaxed);
  while (tracked_bytes > current &&
         !wanted_.compare_exchange_weak(current, tracked_bytes, std::memory_order_relaxed)) {
  }
  if (tracked_bytes <= current) return;
  std::lock_guard lock(growth_mutex_);
  if (!growth_started_ && !stopping_) {
    // Without the thread the checkpoint provides the arena itself, as in the default mode;
    // the start is retried when more bytes are tracked.
    growth_started_ = StartQuietThread(
        &growth_thread_,
        [](void* self) -> void* {
          static_cast<HostCarrier*>(self)->BackgroundGrowth();
          return nullptr;
        },
        this);
  }
  growth_cv_.notify_all();
}

void HostCarrier::BackgroundGrowth() {
  size_t provided = 0;
  for (;;) {
    {
      std::unique_lock lock(growth_mutex_);
      growth_cv_.wait(lock, [&] { return stopping_ || wanted_.load() > provided; });
      if (stopping_) return;
    }
    const size_t target = wanted_.load();
    const Status grown = Provision(target);
    if (!grown) {
      CUSNAP_LOG_WARN("%s; the checkpoint will provide it instead", grown.error().message.c_str());
    }
    provided = target;  // a failure is not retried until more bytes are tracked
  }
}

Result<CarrierTransfer> HostCarrier::Save(std::span<const CarrierSlot> slots,
                                          const std::string& stem_path) {
  std::lock_guard lock(mutex_);
  return MoveLocked(slots, Direction::kToHost, stem_path);
}

Result<CarrierTransfer> HostCarrier::Load(std::span<const CarrierSlot> slots) {
  std::lock_guard lock(mutex_);
  return MoveLocked(slots, Direction::kToDevice);
}

Result<CarrierTransfer> HostCarrier::MoveLocked(std::span<const CarrierSlot> slots,
                                                Direction direction, const std::string& stem_path) {
  const uint64_t start = MonotonicNs();
  if (direction == Direction::kToDevice) {
    if (Status readable = ReadableLocked(); !readable) return readable.error();
  } else {
    file_parts_.clear();  // a new save replaces what the files held
    files_found_ = false;
    files_folder_.reset();
  }
  Transfer t;
  t.slots = slots;
  t.direction = direction;
  if (Status settled = SettleLocked(); !settled) return settled.error();
  for (const CarrierSlot& slot : slots) {
    if (slot.context == nullptr || slot.size == 0) {
      return Error{CUDA_ERROR_INVALID_VALUE,
                   ThisProcess() + ": host carrier: " + SlotText(slot) + " has no context or size"};
    }
  }

  // Where each slot's bytes live in the arena.
  const size_t chunk = options_.chunk_bytes;
  if (direction == Direction::kToHost) {
    std::vector<Placement> layout;
    layout.reserve(slots.size());
    size_t total = 0;
    for (const CarrierSlot& slot : slots) {
      layout.push_back({total, slot.size, std::vector<char>((slot.size + chunk - 1) / chunk, 0)});
      total = RoundUp(total + slot.size, PageSize());
    }
    layout_.clear();
    // Pipelined and kept pinning register piece by piece: they start on the first pieces
    // while later ones are still being provided (a cold save overlaps the two). A save to
    // files needs no arena.
    const bool background = options_.pinning != CarrierPinning::kTransfer;
    if (Status grown = stem_path.empty() ? GrowLocked(total, &t.result.provision_ns, background)
                                         : Status{Ok{}};
        !grown) {
      return grown.error();
    }
    layout_ = std::move(layout);
  } else {
    if (slots.size() != layout_.size()) {
      return Error{CUDA_ERROR_INVALID_VALUE,
                   ThisProcess() + ": host carrier holds " + std::to_string(layout_.size()) +
                       " allocations, asked to load " + std::to_string(slots.size())};
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].size != layout_[i].size) {
        return Error{CUDA_ERROR_INVALID_VALUE,
                     ThisProcess() + ": host carrier: " + SlotText(slots[i]) + " differs from the " +
                         std::to_string(layout_[i].size) + " bytes saved in its place"};
      }
    }
  }
  if (slots.empty()) {
    t.result.ns = MonotonicNs() - start;
    return t.result;
  }

  // One group per context, in first-seen order; a stream and staging mappings for each.
  t.staging.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    CopyGroup* group = nullptr;
    for (CopyGroup& g : t.groups) {
      if (g.context == slots[i].context) group = &g;
    }
    if (group == nullptr) group = &t.groups.emplace_back(CopyGroup{slots[i].context, nullptr, {}, true});
    group->slots.push_back(i);
  }
  for (CopyGroup& group : t.groups) {
    if (t.failure) break;
    ContextScope scope(api_, group.context);
    if (scope.status() != CUDA_SUCCESS) {
      t.Fail(api_, scope.status(), "entering a context");
      break;
    }
    if (CUresult r = api_.cuStreamCreate(&group.stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
      group.stream = nullptr;
      t.Fail(api_, r, "creating a copy stream");
      break;
    }
    for (size_t i : group.slots) {
      const CarrierSlot& slot = slots[i];
      Staging& stage = t.staging[i];
      if (CUresult r = api_.cuMemAddressReserve(&stage.va, slot.size, 0, 0, 0); r != CUDA_SUCCESS) {
        t.Fail(api_, r, "reserving a staging range for " + SlotText(slot));
        break;
      }
      stage.reserved = true;
      stage.size = slot.size;
      if (CUresult r = api_.cuMemMap(stage.va, slot.size, 0, slot.handle, 0); r != CUDA_SUCCESS) {
        t.Fail(api_, r, "mapping " + SlotText(slot) + " for copying");
        break;
      }
      stage.mapped = true;
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = slot.device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if (CUresult r = api_.cuMemSetAccess(stage.va, slot.size, &access, 1); r != CUDA_SUCCESS) {
        t.Fail(api_, r, "granting device " + std::to_string(slot.device) + " access to " + SlotText(slot));
        break;
      }
    }
  }

  if (!t.failure && direction == Direction::kToHost && options_.zero_scan) {
    if (Status scanned = ScanLocked(t); !scanned && !t.failure) t.failure = scanned.error();
  }
  // After a failure: only synchronizes what was enqueued.
  if (direction == Direction::kToDevice && !file_parts_.empty()) {
    StreamFromFilesLocked(t);
  } else if (!stem_path.empty()) {
    StreamToFilesLocked(t, stem_path);
  } else {
    CopyLocked(t);
  }
  t.result.provision_ns += arena_.FinishTouching();  // no touch thread outlives a transfer

  // Remove the staging mappings of every synchronized stream (the others wait in unsynced_).
  for (CopyGroup& group : t.groups) {
    if (!group.synced) continue;
    ContextScope scope(api_, group.context);
    std::vector<Staging> own;
    for (size_t i : group.slots) own.push_back(t.staging[i]);
    RemoveStaging(own);
  }
  t.result.ns = MonotonicNs() - start;
  if (t.failure) {
    // Saved bytes may be incomplete: Load refuses until a Save succeeds. A failed Load only
    // read the arena, so its bytes stay for a retry.
    if (direction == Direction::kToHost) layout_.clear();
    return *t.failure;
  }
  CUSNAP_LOG_INFO("host carrier: %s %llu bytes (%llu of them zero chunks, not copied) in %llu ns "
                  "(copy %llu ns, register %llu ns, provision %llu ns, scan %llu ns)",
                  direction == Direction::kToHost ? "saved" : "loaded",
                  static_cast<unsigned long long>(t.result.bytes),
                  static_cast<unsigned long long>(t.result.zero_bytes),
                  static_cast<unsigned long long>(t.result.ns),
                  static_cast<unsigned long long>(t.result.copy_ns),
                  static_cast<unsigned long long>(t.result.register_ns),
                  static_cast<unsigned long long>(t.result.provision_ns),
                  static_cast<unsigned long long>(t.result.scan_ns));
  return t.result;
}

Status HostCarrier::ScanLocked(Transfer& t) {
  // Per group: one flag word per chunk of its scannable slots, on its device; the kernels
  // of every group are enqueued before any is waited for, so devices scan at once.
  const uint64_t start = MonotonicNs();
  const size_t chunk = options_.chunk_bytes;
  struct Flags {
    CUdeviceptr device = 0;
    std::vector<uint32_t> host;
    std::vector<std::pair<size_t, size_t>> bases;  // (slot, first flag)
    bool launched = false;
  };
  std::vector<Flags> flags(t.groups.size());
  for (size_t g = 0; g < t.groups.size(); ++g) {
    CopyGroup& group = t.groups[g];
    Flags& f = flags[g];
    size_t count = 0;
    for (size_t i : group.slots) {
      if (!t.slots[i].scan || t.slots[i].size % sizeof(uint64_t) != 0) continue;
      f.bases.emplace_back(i, count);
      count += layout_[i].zero.size();
    }
    if (count == 0) continue;
    ContextScope scope(api_, group.context);
    if (scope.status() != CUDA_SUCCESS ||
        api_.cuMemAlloc_v2(&f.device, count * sizeof(uint32_t)) != CUDA_SUCCESS) {
      f.device = 0;
      continue;  // no scan here: every chunk is copied
    }
    f.host.assign(count, 1);
    if (api_.cuMemsetD32Async(f.device, 0, count, group.stream) != CUDA_SUCCESS) continue;
    f.launched = true;
    for (const auto& [slot, base] : f.bases) {
      const CUresult r = scanner_.Enqueue(group.context, group.stream, t.staging[slot].va,
                                          t.slots[slot].size, chunk, f.device + base * sizeof(uint32_t));
      if (r != CUDA_SUCCESS) {
        f.launched = false;  // nothing found zero in this group
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
          CUSNAP_LOG_WARN("host carrier: zero-chunk scan of %s: %s; its chunks are all copied",
                          SlotText(t.slots[slot]).c_str(), ResultText(api_, r).c_str());
        }
        break;
      }
    }
  }
  for (size_t g = 0; g < t.groups.size(); ++g) {
    Flags& f = flags[g];
    if (f.device == 0) continue;
    CopyGroup& group = t.groups[g];
    ContextScope scope(api_, group.context);
    const CUresult synced = api_.cuStreamSynchronize(group.stream);
    if (synced != CUDA_SUCCESS) {
      // The kernels may still read the staging mappings and write the flags: both stay.
      group.synced = false;
      unsynced_.push_back(Unsynced{group.context, group.stream, {}});
      for (size_t i : group.slots) {
        unsynced_.back().staging.push_back(t.staging[i]);
        t.staging[i] = Staging{};
      }
      group.stream = nullptr;
      t.Fail(api_, synced, "synchronizing the zero-chunk scan");
      continue;
    }
    if (f.launched &&
        api_.cuMemcpyDtoH_v2(f.host.data(), f.device, f.host.size() * sizeof(uint32_t)) != CUDA_SUCCESS) {
      f.launched = false;
    }
    api_.cuMemFree_v2(f.device);
    if (!f.launched) continue;
    for (const auto& [slot, base] : f.bases) {
      std::vector<char>& zero = layout_[slot].zero;
      for (size_t c = 0; c < zero.size(); ++c) zero[c] = f.host[base + c] == 0;
    }
  }
  t.result.scan_ns = MonotonicNs() - start;
  return Ok{};
}

void HostCarrier::CopyLocked(Transfer& t) {
  const size_t chunk = options_.chunk_bytes;
  const bool to_host = t.direction == Direction::kToHost;
  // Chunks of every group, taken in turn so that every device has copies queued. Zero
  // chunks: a memset at load, nothing at save.
  std::vector<std::deque<Chunk>> per_group(t.groups.size());
  std::vector<Chunk> zero_chunks;  // kept pinning registers their bytes after the copies
  for (size_t g = 0; g < t.groups.size(); ++g) {
    for (size_t i : t.groups[g].slots) {
      const Placement& place = layout_[i];
      t.result.bytes += place.size;
      for (size_t c = 0; c < place.zero.size(); ++c) {
        const size_t offset = c * chunk;
        const size_t bytes = place.size - offset < chunk ? place.size - offset : chunk;
        if (place.zero[c]) {
          t.result.zero_bytes += bytes;
          zero_chunks.push_back(Chunk{i, g, offset, bytes});
          if (!to_host) per_group[g].push_back(Chunk{i, g, offset, bytes});
          continue;
        }
        per_group[g].push_back(Chunk{i, g, offset, bytes});
      }
    }
  }
  std::vector<Chunk> order;
  for (bool more = true; more;) {
    more = false;
    for (std::deque<Chunk>& queue : per_group) {
      if (queue.empty()) continue;
      order.push_back(queue.front());
      queue.pop_front();
      more = true;
    }
  }

  const CarrierPinning pinning = options_.pinning;
  const size_t used = layout_.back().offset + RoundUp(layout_.back().size, PageSize());
  const uint64_t phase = MonotonicNs();
  std::byte* const arena = arena_.data();
  // Transfer: the used arena registered for this transfer only.
  if (!t.failure && pinning == CarrierPinning::kTransfer) {
    if (CUresult r = RegisterLocked(t.groups.front().context, arena, used, &t.result.register_ns);
        r != CUDA_SUCCESS) {
      t.Fail(api_, r, "registering " + std::to_string(used) + " bytes of arena");
    }
  }

  // Pipelined: every chunk to copy is pinned ahead and unpinned behind by the pinner's
  // threads. Kept, until the whole arena is registered: the chunks to copy are pinned ahead
  // of their copies, then the rest of the arena, and all of it stays registered.
  const bool pin_chunks = pinning == CarrierPinning::kPipelined ||
                          (pinning == CarrierPinning::kKept && !arena_pinned_);
  std::optional<ChunkPinner> pinner;
  std::vector<ChunkPinner::Piece> pieces;
  std::vector<size_t> piece_of(order.size(), SIZE_MAX);  // per chunk of `order`
  std::vector<size_t> chunk_of;                          // per piece; SIZE_MAX: not copied
  if (!t.failure && pin_chunks) {
    for (size_t k = 0; k < order.size(); ++k) {
      const Chunk& c = order[k];
      if (layout_[c.slot].zero[c.offset / chunk]) continue;  // a memset: nothing to pin
      piece_of[k] = pieces.size();
      chunk_of.push_back(k);
      pieces.push_back({t.groups[c.group].context, arena + layout_[c.slot].offset + c.offset,
                        RoundUp(c.bytes, PageSize())});
    }
    if (pinning == CarrierPinning::kKept) {
      // The rest of the arena, after the copied chunks: zero chunks, then the unused tail.
      auto uncopied = [&](std::byte* begin, size_t bytes) {
        chunk_of.push_back(SIZE_MAX);
        pieces.push_back({t.groups.front().context, begin, bytes});
      };
      for (const Chunk& c : zero_chunks) {
        uncopied(arena + layout_[c.slot].offset + c.offset, RoundUp(c.bytes, PageSize()));
      }
      for (size_t at = used; at < arena_.capacity(); at += chunk) {
        uncopied(arena + at, arena_.capacity() - at < chunk ? arena_.capacity() - at : chunk);
      }
    }
    pinner.emplace(api_, pieces,
                   pinning == CarrierPinning::kKept ? ChunkPinner::Mode::kKeep
                                                    : ChunkPinner::Mode::kUnpinBehind,
                   [this](const ChunkPinner::Piece& p) { arena_.WaitTouched(p.begin, p.bytes); });
  }
  const bool unpin_behind = pinner && pinning == CarrierPinning::kPipelined;

  for (size_t k = 0; k < order.size(); ++k) {
    if (t.failure) break;
    Chunk& c = order[k];
    const CopyGroup& group = t.groups[c.group];
    const CarrierSlot& slot = t.slots[c.slot];
    ContextScope scope(api_, group.context);
    if (scope.status() != CUDA_SUCCESS) {
      t.Fail(api_, scope.status(), "entering a context");
      break;
    }
    const CUdeviceptr device = t.staging[c.slot].va + c.offset;
    if (layout_[c.slot].zero[c.offset / chunk]) {  // load only
      if (CUresult r = api_.cuMemsetD8Async(device, 0, c.bytes, group.stream); r != CUDA_SUCCESS) {
        t.Fail(api_, r, "zeroing " + ChunkText(c.offset, c.bytes) + SlotText(slot));
      }
      continue;
    }
    std::byte* host = arena + layout_[c.slot].offset + c.offset;
    if (pinner) {
      if (CUresult r = pinner->WaitPinned(piece_of[k]); r != CUDA_SUCCESS) {
        t.Fail(api_, r, "registering the arena's " + ChunkText(c.offset, c.bytes) + SlotText(slot));
        break;
      }
    }
    const CUresult r = to_host ? api_.cuMemcpyDtoHAsync_v2(host, device, c.bytes, group.stream)
                               : api_.cuMemcpyHtoDAsync_v2(device, host, c.bytes, group.stream);
    if (r != CUDA_SUCCESS) {
      t.Fail(api_, r, std::string(to_host ? "copying " : "restoring ") +
                          ChunkText(c.offset, c.bytes) + SlotText(slot));
      break;
    }
    ++t.result.chunks;
    if (!unpin_behind) continue;
    CUevent done = nullptr;
    if (CUresult e = api_.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING); e != CUDA_SUCCESS) {
      t.Fail(api_, e, "creating an event");
      break;
    }
    if (CUresult e = api_.cuEventRecord(done, group.stream); e != CUDA_SUCCESS) {
      api_.cuEventDestroy_v2(done);
      t.Fail(api_, e, "recording an event");
      break;
    }
    pinner->Unpin(piece_of[k], done);
  }
  if (pinner) {
    // Pieces the pinner left registered (a failure, or never copied) are unregistered below
    // once the streams are synchronized, or by the next transfer (SettleLocked).
    const ChunkPinner::Outcome pinned = pinner->Finish();
    t.result.register_ns += pinned.register_ns;
    if (pinned.result != CUDA_SUCCESS) {
      std::string what = pinned.action;
      what += ' ';
      if (const size_t k = chunk_of[pinned.piece]; k != SIZE_MAX) {
        what += ChunkText(order[k].offset, order[k].bytes);
        what += SlotText(t.slots[order[k].slot]);
      } else {
        const ChunkPinner::Piece& piece = pieces[pinned.piece];
        const size_t offset = static_cast<size_t>(piece.begin - arena);
        what += "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + piece.bytes) +
                ") (kept pinned for later cycles: no copy of this one uses them)";
      }
      t.Fail(api_, pinned.result, what);
    }
    for (size_t piece : pinned.still_registered) {
      registrations_.push_back(Registration{pieces[piece].begin, pieces[piece].context});
    }
    arena_pinned_ = pinning == CarrierPinning::kKept && pinned.result == CUDA_SUCCESS;
  }

  const bool all_synced = SynchronizeLocked(t);
  t.result.copy_ns = MonotonicNs() - phase;
  // Unpin what this transfer pinned (a whole kept registration stays). A failure leaves the
  // rest registered: the next transfer unregisters it first (SettleLocked).
  if (all_synced && (pinning != CarrierPinning::kKept || !arena_pinned_)) {
    if (CUresult r = UnregisterAllLocked(&t.result.register_ns); r != CUDA_SUCCESS) {
      t.Fail(api_, r, "unregistering the arena");
    }
  }
}

bool HostCarrier::SynchronizeLocked(Transfer& t) {
  // Nothing enqueued may still run when this returns. A failed synchronize leaves completion
  // unknown: the stream is kept, with its staging mappings and the arena's registrations,
  // and synchronized again before the arena is used, moved or unregistered (SettleLocked).
  bool all_synced = true;
  for (CopyGroup& group : t.groups) {
    if (group.stream == nullptr) continue;
    ContextScope scope(api_, group.context);
    const CUresult synced = scope.status() == CUDA_SUCCESS ? api_.cuStreamSynchronize(group.stream)
                                                           : scope.status();
    if (synced != CUDA_SUCCESS) {
      group.synced = false;
      all_synced = false;
      Unsynced& kept = unsynced_.emplace_back(Unsynced{group.context, group.stream, {}});
      for (size_t i : group.slots) {
        kept.staging.push_back(t.staging[i]);
        t.staging[i] = Staging{};
      }
      t.Fail(api_, synced, "synchronizing the copies");
      continue;
    }
    api_.cuStreamDestroy_v2(group.stream);
  }
  return all_synced;
}

Status HostCarrier::SettleLocked() {
  while (!unsynced_.empty()) {
    const Unsynced& pending = unsynced_.back();
    ContextScope scope(api_, pending.context);
    const CUresult synced = scope.status() == CUDA_SUCCESS ? api_.cuStreamSynchronize(pending.stream)
                                                           : scope.status();
    if (synced != CUDA_SUCCESS) {
      return CarrierDriverError(api_, synced, "synchronizing the copies of an earlier, failed transfer");
    }
    api_.cuStreamDestroy_v2(pending.stream);
    RemoveStaging(pending.staging);
    unsynced_.pop_back();
  }
  // Only a whole kept registration stays: a failed kept pinning's pieces go, and the kept
  // pinning starts again from nothing.
  if (options_.pinning != CarrierPinning::kKept || !arena_pinned_) {
    uint64_t ns = 0;
    if (CUresult r = UnregisterAllLocked(&ns); r != CUDA_SUCCESS) {
      return CarrierDriverError(api_, r, "unregistering the arena after an earlier, failed transfer");
    }
  }
  return Ok{};
}

void HostCarrier::RemoveStaging(std::span<const Staging> staging) {
  for (const Staging& stage : staging) {
    if (stage.mapped) api_.cuMemUnmap(stage.va, stage.size);
    if (stage.reserved) api_.cuMemAddressFree(stage.va, stage.size);
  }
}

CUresult HostCarrier::RegisterLocked(CUcontext context, std::byte* begin, size_t bytes, uint64_t* ns) {
  ContextScope scope(api_, context);
  if (scope.status() != CUDA_SUCCESS) return scope.status();
  // PORTABLE: every context's copies see it as pinned.
  const CUresult r =
      Timed(ns, [&] { return api_.cuMemHostRegister_v2(begin, bytes, CU_MEMHOSTREGISTER_PORTABLE); });
  if (r == CUDA_SUCCESS) registrations_.push_back(Registration{begin, context});
  return r;
}

CUresult HostCarrier::UnregisterLocked(std::byte* begin, uint64_t* ns) {
  for (size_t k = 0; k < registrations_.size(); ++k) {
    if (registrations_[k].begin != begin) continue;
    ContextScope scope(api_, registrations_[k].context);
    const CUresult r = scope.status() == CUDA_SUCCESS
                           ? Timed(ns, [&] { return api_.cuMemHostUnregister(begin); })
                           : scope.status();
    if (r == CUDA_SUCCESS) {
      registrations_.erase(registrations_.begin() + static_cast<long>(k));
      arena_pinned_ = false;
    }
    return r;
  }
  return CUDA_SUCCESS;
}

CUresult HostCarrier::UnregisterAllLocked(uint64_t* ns) {
  CUresult first = CUDA_SUCCESS;
  for (size_t k = registrations_.size(); k-- > 0;) {
    const CUresult r = UnregisterLocked(registrations_[k].begin, ns);
    if (first == CUDA_SUCCESS) first = r;
  }
  return first;
}

void HostCarrier::Discard() {
  std::lock_guard lock(mutex_);
  layout_.clear();
  file_parts_.clear();
  files_found_ = false;
  files_folder_.reset();
  if (options_.keep_bytes >= arena_.capacity() || !unsynced_.empty()) return;
  uint64_t ns = 0;
  if (UnregisterAllLocked(&ns) != CUDA_SUCCESS) return;  // still pinned: kept whole
  arena_.ShrinkTo(options_.keep_bytes);
  CUSNAP_LOG_INFO("host carrier: arena kept at %zu bytes (CUSNAP_CARRIER_KEEP)", arena_.capacity());
}

size_t HostCarrier::capacity() const {
  std::lock_guard lock(mutex_);
  return arena_.capacity();
}

size_t HostCarrier::GrowthFor(size_t bytes) const {
  const size_t wanted = RoundUp(bytes, kArenaStep);
  std::lock_guard lock(mutex_);
  return wanted > arena_.capacity() ? wanted - arena_.capacity() : 0;
}

size_t HostCarrier::saved_bytes() const {
  std::lock_guard lock(mutex_);
  return SavedBytesLocked();
}

size_t HostCarrier::SavedBytesLocked() const {
  size_t total = 0;
  for (const Placement& p : layout_) total += p.size;
  return total;
}

std::span<const std::byte> HostCarrier::saved(size_t index) const {
  std::lock_guard lock(mutex_);
  if (index >= layout_.size()) return {};
  return {arena_.data() + layout_[index].offset, layout_[index].size};
}

bool HostCarrier::saved_zero(size_t index, size_t offset) const {
  std::lock_guard lock(mutex_);
  if (index >= layout_.size() || offset >= layout_[index].size) return false;
  return layout_[index].zero[offset / options_.chunk_bytes] != 0;
}

bool HostCarrier::registered() const {
  std::lock_guard lock(mutex_);
  return !registrations_.empty();
}

bool HostCarrier::poisoned() const {
  std::lock_guard lock(mutex_);
  return !unsynced_.empty();
}

}  // namespace cusnap::shim
