// The host carrier (carrier.h): arena provisioning, registration around each transfer, and
// per-context asynchronous copies through staging mappings.
#include "shim/carrier/carrier.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "shim/intercept/context_scope.h"

namespace cusnap::shim {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }

// The arena grows in whole 2 MiB steps: the VMM granularity, and what transparent huge
// pages use.
constexpr size_t kArenaStep = size_t{2} << 20;

std::string Describe(const CarrierSlot& slot) {
  char text[96];
  snprintf(text, sizeof text, "allocation handle 0x%llx (%zu bytes, device %d)",
           static_cast<unsigned long long>(slot.handle), slot.size, slot.device);
  return text;
}

Error DriverError(const DriverApi& api, CUresult result, const std::string& what) {
  return Error{static_cast<int>(result), ThisProcess() + ": host carrier: " + what +
                                             " failed with " + ResultText(api, result)};
}

// First-touches [begin, begin + bytes) so the kernel provides the pages now, not during the
// copies (DRIVER-FACTS "Speeds": first touch is the slow part of providing memory).
void Touch(std::byte* begin, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  const size_t page = PageSize();
  for (size_t at = 0; at < bytes; at += page) {
    *reinterpret_cast<volatile unsigned char*>(begin + at) = 0;
  }
}

// One context's share of a transfer: its stream and its slots.
struct Group {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::vector<size_t> slots;
};

}  // namespace

CarrierMode CarrierModeFromEnvironment() {
  const char* value = getenv("CUSNAP_CARRIER");
  if (value == nullptr || *value == '\0' || strcmp(value, "lazy") == 0) return CarrierMode::kLazy;
  if (strcmp(value, "eager") == 0) return CarrierMode::kEager;
  // Error level: a mistyped setting must be seen at the default log level (issue 17).
  CUSNAP_LOG_ERROR("CUSNAP_CARRIER=%s is neither 'lazy' nor 'eager'; using lazy", value);
  return CarrierMode::kLazy;
}

HostCarrier::HostCarrier(const DriverApi& api, CarrierMode mode) : api_(api), mode_(mode) {}

HostCarrier::~HostCarrier() {
  {
    std::lock_guard lock(growth_mutex_);
    stopping_ = true;
  }
  growth_cv_.notify_all();
  if (growth_thread_.joinable()) growth_thread_.join();
  std::lock_guard lock(mutex_);
  // An arena with unsynchronized copies may still be written by the device: leave it mapped.
  if (arena_ != nullptr && unsynced_.empty()) munmap(arena_, capacity_);
}

Status HostCarrier::Provision(size_t bytes) {
  std::lock_guard lock(mutex_);
  uint64_t ns = 0;
  return GrowLocked(bytes, &ns);
}

Status HostCarrier::GrowLocked(size_t bytes, uint64_t* provision_ns) {
  *provision_ns = 0;
  if (bytes <= capacity_) return Ok{};
  if (!unsynced_.empty() || registered_) {
    return Error{ENOMEM, ThisProcess() + ": host carrier: the arena cannot grow while the driver "
                         "may still use it (a copy of unknown completion, or still registered)"};
  }
  const uint64_t start = MonotonicNs();
  const size_t wanted = RoundUp(bytes, kArenaStep);
  void* grown = capacity_ == 0
                    ? mmap(nullptr, wanted, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0)
                    : mremap(arena_, capacity_, wanted, MREMAP_MAYMOVE);
  if (grown == MAP_FAILED) {
    const int error = errno;
    return Error{error, ThisProcess() + ": host carrier: cannot grow the host arena from " +
                            std::to_string(capacity_) + " to " + std::to_string(wanted) +
                            " bytes: " + strerror(error)};
  }
  arena_ = static_cast<std::byte*>(grown);
  Touch(arena_ + capacity_, wanted - capacity_);
  capacity_ = wanted;
  *provision_ns = MonotonicNs() - start;
  CUSNAP_LOG_INFO("host carrier: arena grown to %zu bytes in %llu ns", capacity_,
                  static_cast<unsigned long long>(*provision_ns));
  return Ok{};
}

void HostCarrier::Anticipate(size_t tracked_bytes) {
  if (mode_ != CarrierMode::kEager) return;
  size_t current = wanted_.load(std::memory_order_relaxed);
  while (tracked_bytes > current &&
         !wanted_.compare_exchange_weak(current, tracked_bytes, std::memory_order_relaxed)) {
  }
  if (tracked_bytes <= current) return;
  std::lock_guard lock(growth_mutex_);
  if (!growth_thread_.joinable() && !stopping_) {
    growth_thread_ = std::thread([this] { BackgroundGrowth(); });
  }
  growth_cv_.notify_all();
}

void HostCarrier::BackgroundGrowth() {
  // A thread of the shim inside the application: the application's signal handlers never
  // run on it.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
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

Result<CarrierTransfer> HostCarrier::Save(std::span<const CarrierSlot> slots) {
  std::lock_guard lock(mutex_);
  return MoveLocked(slots, Direction::kToHost);
}

Result<CarrierTransfer> HostCarrier::Load(std::span<const CarrierSlot> slots) {
  std::lock_guard lock(mutex_);
  return MoveLocked(slots, Direction::kToDevice);
}

Result<CarrierTransfer> HostCarrier::MoveLocked(std::span<const CarrierSlot> slots,
                                                Direction direction) {
  const uint64_t start = MonotonicNs();
  CarrierTransfer transfer;
  if (Status settled = SettleLocked(); !settled) return settled.error();
  for (const CarrierSlot& slot : slots) {
    if (slot.context == nullptr || slot.size == 0) {
      return Error{CUDA_ERROR_INVALID_VALUE,
                   ThisProcess() + ": host carrier: " + Describe(slot) + " has no context or size"};
    }
  }

  // Where each slot's bytes live in the arena.
  if (direction == Direction::kToHost) {
    std::vector<Placement> layout;
    layout.reserve(slots.size());
    size_t total = 0;
    for (const CarrierSlot& slot : slots) {
      layout.push_back({total, slot.size});
      total = RoundUp(total + slot.size, PageSize());
    }
    layout_.clear();
    if (Status grown = GrowLocked(total, &transfer.provision_ns); !grown) return grown.error();
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
                     ThisProcess() + ": host carrier: " + Describe(slots[i]) + " differs from the " +
                         std::to_string(layout_[i].size) + " bytes saved in its place"};
      }
    }
  }
  if (slots.empty()) {
    transfer.ns = MonotonicNs() - start;
    return transfer;
  }
  const size_t used = layout_.back().offset + RoundUp(layout_.back().size, PageSize());

  // Pinned only while the bytes move (DRIVER-FACTS "Speeds"). PORTABLE: every context's
  // copies see it as pinned.
  uint64_t phase = MonotonicNs();
  {
    ContextScope scope(api_, slots.front().context);
    if (scope.status() != CUDA_SUCCESS) return DriverError(api_, scope.status(), "entering a context");
    const CUresult registered =
        api_.cuMemHostRegister_v2(arena_, used, CU_MEMHOSTREGISTER_PORTABLE);
    if (registered != CUDA_SUCCESS) {
      return DriverError(api_, registered, "registering " + std::to_string(used) + " bytes of arena");
    }
    registered_ = true;
    registered_context_ = slots.front().context;
  }
  transfer.register_ns = MonotonicNs() - phase;

  // One group per context, in first-seen order.
  std::vector<Group> groups;
  std::vector<Staging> staging(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    Group* group = nullptr;
    for (Group& g : groups) {
      if (g.context == slots[i].context) group = &g;
    }
    if (group == nullptr) group = &groups.emplace_back(Group{slots[i].context, nullptr, {}});
    group->slots.push_back(i);
  }

  // Enqueue every copy of every context before synchronizing any, so devices overlap.
  phase = MonotonicNs();
  std::optional<Error> failure;
  const auto fail = [&](CUresult result, const std::string& what) {
    if (!failure) failure = DriverError(api_, result, what);
  };
  const CUmemAccessDesc access_template{};
  for (Group& group : groups) {
    if (failure) break;
    ContextScope scope(api_, group.context);
    if (scope.status() != CUDA_SUCCESS) {
      fail(scope.status(), "entering a context");
      break;
    }
    if (CUresult r = api_.cuStreamCreate(&group.stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
      group.stream = nullptr;
      fail(r, "creating a copy stream");
      break;
    }
    for (size_t i : group.slots) {
      const CarrierSlot& slot = slots[i];
      Staging& stage = staging[i];
      if (CUresult r = api_.cuMemAddressReserve(&stage.va, slot.size, 0, 0, 0); r != CUDA_SUCCESS) {
        fail(r, "reserving a staging range for " + Describe(slot));
        break;
      }
      stage.reserved = true;
      stage.size = slot.size;
      if (CUresult r = api_.cuMemMap(stage.va, slot.size, 0, slot.handle, 0); r != CUDA_SUCCESS) {
        fail(r, "mapping " + Describe(slot) + " for copying");
        break;
      }
      stage.mapped = true;
      CUmemAccessDesc access = access_template;
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = slot.device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if (CUresult r = api_.cuMemSetAccess(stage.va, slot.size, &access, 1); r != CUDA_SUCCESS) {
        fail(r, "granting device " + std::to_string(slot.device) + " access to " + Describe(slot));
        break;
      }
      std::byte* host = arena_ + layout_[i].offset;
      const CUresult r =
          direction == Direction::kToHost
              ? api_.cuMemcpyDtoHAsync_v2(host, stage.va, slot.size, group.stream)
              : api_.cuMemcpyHtoDAsync_v2(stage.va, host, slot.size, group.stream);
      if (r != CUDA_SUCCESS) {
        fail(r, std::string(direction == Direction::kToHost ? "copying " : "restoring ") +
                    Describe(slot));
        break;
      }
      transfer.bytes += slot.size;
    }
  }

  // One synchronize per context, even after a failure: nothing enqueued may still run when
  // this returns. A failed synchronize leaves completion unknown: the stream is kept and
  // synchronized again before the arena is used, moved or unregistered (SettleLocked).
  for (Group& group : groups) {
    if (group.stream == nullptr) continue;
    ContextScope scope(api_, group.context);
    const CUresult synced = scope.status() == CUDA_SUCCESS ? api_.cuStreamSynchronize(group.stream)
                                                           : scope.status();
    if (synced != CUDA_SUCCESS) {
      Unsynced& kept = unsynced_.emplace_back(Unsynced{group.context, group.stream, {}});
      for (size_t i : group.slots) {
        kept.staging.push_back(staging[i]);
        staging[i] = Staging{};  // removed once the stream is synchronized (SettleLocked)
      }
      fail(synced, "synchronizing the copies");
      continue;
    }
    api_.cuStreamDestroy_v2(group.stream);
  }
  transfer.copy_ns = MonotonicNs() - phase;

  // Remove the staging mappings, then unpin.
  for (Group& group : groups) {
    ContextScope scope(api_, group.context);
    std::vector<Staging> own;
    for (size_t i : group.slots) own.push_back(staging[i]);
    RemoveStaging(own);
  }
  phase = MonotonicNs();
  if (unsynced_.empty()) {
    // A failure leaves registered_ set: the next transfer unregisters first (SettleLocked).
    if (CUresult r = UnregisterLocked(slots.front().context); r != CUDA_SUCCESS) {
      fail(r, "unregistering the arena");
    }
  }
  transfer.register_ns += MonotonicNs() - phase;
  transfer.ns = MonotonicNs() - start;
  if (failure) {
    // Saved bytes may be incomplete: Load refuses until a Save succeeds. A failed Load only
    // read the arena, so its bytes stay for a retry.
    if (direction == Direction::kToHost) layout_.clear();
    return *failure;
  }
  CUSNAP_LOG_INFO("host carrier: %s %llu bytes in %llu ns (copy %llu ns, register %llu ns, "
                  "provision %llu ns)",
                  direction == Direction::kToHost ? "saved" : "loaded",
                  static_cast<unsigned long long>(transfer.bytes),
                  static_cast<unsigned long long>(transfer.ns),
                  static_cast<unsigned long long>(transfer.copy_ns),
                  static_cast<unsigned long long>(transfer.register_ns),
                  static_cast<unsigned long long>(transfer.provision_ns));
  return transfer;
}

Status HostCarrier::SettleLocked() {
  while (!unsynced_.empty()) {
    const Unsynced& pending = unsynced_.back();
    ContextScope scope(api_, pending.context);
    const CUresult synced = scope.status() == CUDA_SUCCESS ? api_.cuStreamSynchronize(pending.stream)
                                                           : scope.status();
    if (synced != CUDA_SUCCESS) {
      return DriverError(api_, synced, "synchronizing the copies of an earlier, failed transfer");
    }
    api_.cuStreamDestroy_v2(pending.stream);
    RemoveStaging(pending.staging);
    unsynced_.pop_back();
  }
  if (registered_) {
    if (CUresult r = UnregisterLocked(registered_context_); r != CUDA_SUCCESS) {
      return DriverError(api_, r, "unregistering the arena after an earlier, failed transfer");
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

CUresult HostCarrier::UnregisterLocked(CUcontext context) {
  ContextScope scope(api_, context);
  const CUresult r = scope.status() == CUDA_SUCCESS ? api_.cuMemHostUnregister(arena_) : scope.status();
  if (r == CUDA_SUCCESS) registered_ = false;
  return r;
}

void HostCarrier::Discard() {
  std::lock_guard lock(mutex_);
  layout_.clear();
}

size_t HostCarrier::capacity() const {
  std::lock_guard lock(mutex_);
  return capacity_;
}

size_t HostCarrier::GrowthFor(size_t bytes) const {
  const size_t wanted = RoundUp(bytes, kArenaStep);
  std::lock_guard lock(mutex_);
  return wanted > capacity_ ? wanted - capacity_ : 0;
}

size_t HostCarrier::saved_bytes() const {
  std::lock_guard lock(mutex_);
  size_t total = 0;
  for (const Placement& p : layout_) total += p.size;
  return total;
}

std::span<const std::byte> HostCarrier::saved(size_t index) const {
  std::lock_guard lock(mutex_);
  if (index >= layout_.size()) return {};
  return {arena_ + layout_[index].offset, layout_[index].size};
}

bool HostCarrier::poisoned() const {
  std::lock_guard lock(mutex_);
  return !unsynced_.empty();
}

}  // namespace cusnap::shim
