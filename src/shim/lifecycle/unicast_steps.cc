// Unicast lifecycle work (unicast_steps.h).
#include "shim/lifecycle/unicast_steps.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/log.h"
#include "shim/driver/context_scope.h"
#include "shim/lifecycle/lifecycle_common.h"
#include "shim/tables/gpu_identity.h"

namespace cusnap::shim {
namespace {

Error DriverError(CUresult result, const std::string& what) {
  return Error{static_cast<int>(result),
               ThisProcess() + ": " + what + " failed with " + ResultText(driver(), result)};
}

StepResult FromTransfer(const CarrierTransfer& transfer) {
  return StepResult{transfer.bytes, transfer.copy_ns, transfer.zero_bytes};
}

// True when `pid` has exited and waits to be reaped (state Z or X): its start time still
// reads, but nothing of it answers any more.
bool Unreaped(int pid) {
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* name_end = std::strrchr(buf, ')');
  return name_end != nullptr && name_end[1] == ' ' && (name_end[2] == 'Z' || name_end[2] == 'X');
}

}  // namespace

UnicastSteps::UnicastSteps(const DriverApi& api, SharingTable& table, ExportCache& cache,
                           HostCarrier& carrier, ExportFetcher fetch, HeldAsker ask_held)
    : api_(api),
      table_(table),
      cache_(cache),
      carrier_(carrier),
      fetch_(fetch),
      ask_held_(ask_held) {}

Result<CUdevice> UnicastSteps::DeviceOf(CUcontext context) {
  ContextScope scope(api_, context);
  if (scope.status() != CUDA_SUCCESS) return DriverError(scope.status(), "entering a context");
  CUdevice device = 0;
  if (CUresult r = api_.cuCtxGetDevice(&device); r != CUDA_SUCCESS) {
    return DriverError(r, "asking a context for its device");
  }
  return device;
}

Result<CUcontext> UnicastSteps::ContextFor(const AllocationInfo& allocation,
                                           const std::vector<MappingInfo>& mappings) {
  if (allocation.context != nullptr) return allocation.context;
  // No context was current when it was created or shared: use the primary context of its
  // device (a HOST_NUMA allocation: of the first device given access to it, else device 0).
  // An imported allocation's location is the creator's GPU, which this process may not see
  // (CUDA_VISIBLE_DEVICES; the driver then names it by an index that is no ordinal here,
  // DRIVER-FACTS F13c): only this process's own access descriptors name its devices.
  const auto first_device_with_access = [&]() -> int {
    for (const MappingInfo& m : mappings) {
      if (m.key != allocation.key) continue;
      for (uint32_t i = 0; i < m.access_count; ++i) {
        if (m.access[i].location_type == CU_MEM_LOCATION_TYPE_DEVICE) return m.access[i].location_id;
      }
    }
    return 0;
  };
  const int ordinal =
      allocation.creator && allocation.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
          ? allocation.prop.location.id
          : first_device_with_access();
  constexpr int kSlots = static_cast<int>(sizeof primary_ / sizeof primary_[0]);
  if (ordinal < 0 || ordinal >= kSlots) {
    return Error{CUDA_ERROR_INVALID_DEVICE, ThisProcess() + ": " + DescribeObject(allocation.id) +
                                                " is on device " + std::to_string(ordinal) +
                                                ", out of range"};
  }
  if (primary_[ordinal] == nullptr) {
    CUdevice device = 0;
    if (CUresult r = api_.cuDeviceGet(&device, ordinal); r != CUDA_SUCCESS) {
      return DriverError(r, "cuDeviceGet(" + std::to_string(ordinal) + ")");
    }
    // Retained for the life of the process: the allocations live in it after restore.
    if (CUresult r = api_.cuDevicePrimaryCtxRetain(&primary_[ordinal], device); r != CUDA_SUCCESS) {
      primary_[ordinal] = nullptr;
      return DriverError(r, "retaining the primary context of device " + std::to_string(ordinal));
    }
  }
  return primary_[ordinal];
}

Result<StepResult> UnicastSteps::Save(const std::string& carrier_path) {
  held_.clear();
  mappings_ = table_.Mappings();
  std::vector<CarrierSlot> slots;
  for (const AllocationInfo& a : table_.Allocations()) {
    if (!a.has_real && !a.creator) {
      Result<bool> alive = CreatorAlive(a.id);
      if (!alive) return alive.error();
      if (!*alive) continue;  // orphaned by a restore
    }
    if (!a.has_real) {
      return Error{CUDA_ERROR_INVALID_HANDLE,
                   ThisProcess() + ": " + DescribeObject(a.id) + " has no driver handle while ACTIVE"};
    }
    Result<CUcontext> context = ContextFor(a, mappings_);
    if (!context) return context.error();
    Result<CUdevice> device = DeviceOf(*context);
    if (!device) return device.error();
    Held held;
    held.key = a.key;
    held.id = a.id;
    held.capability = a.capability;
    held.size = a.size;
    held.prop = a.prop;
    held.context = *context;
    held.device = *device;
    held.creator = a.creator;
    held.shared = a.shared;
    held.real = a.real;
    held.mapped.assign(mappings_.size(), 0);
    if (a.creator && (a.handles > 0 || a.mappings > 0)) {
      held.saved = true;
      // HOST_NUMA memory is not scanned for zero chunks: read from the device it costs as
      // much as the copy it could save.
      slots.push_back(CarrierSlot{a.real, a.size, *context, *device,
                                  a.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE});
    }
    held_.push_back(held);
  }
  Result<CarrierTransfer> transfer = carrier_.Save(slots, carrier_path);
  if (!transfer) return transfer.error();
  return FromTransfer(*transfer);
}

Status UnicastSteps::Release() {
  // Resumable: what an earlier, failed attempt already unmapped or released is skipped.
  // Unmap first: the driver frees an allocation once no handle and no mapping is left.
  const uint64_t start = MonotonicNs();
  unmapped_.resize(mappings_.size(), 0);
  for (size_t k = 0; k < mappings_.size(); ++k) {
    const MappingInfo& m = mappings_[k];
    const Held* owner = nullptr;
    for (const Held& h : held_) {
      if (h.key == m.key) owner = &h;
    }
    if (owner == nullptr || unmapped_[k]) continue;
    ContextScope scope(api_, owner->context);
    if (scope.status() != CUDA_SUCCESS) return DriverError(scope.status(), "entering a context");
    if (CUresult r = api_.cuMemUnmap(m.address, m.size); r != CUDA_SUCCESS) {
      return DriverError(r, "unmapping " + VaRangeText(m.address, m.size) + " of " +
                                DescribeObject(owner->id));
    }
    unmapped_[k] = 1;
  }
  const uint64_t unmapped = MonotonicNs();
  for (Held& h : held_) {
    if (h.released) continue;
    ContextScope scope(api_, h.context);
    if (scope.status() != CUDA_SUCCESS) return DriverError(scope.status(), "entering a context");
    if (CUresult r = api_.cuMemRelease(h.real); r != CUDA_SUCCESS) {
      return DriverError(r, "releasing the driver handle of " + DescribeObject(h.id));
    }
    h.released = true;
    table_.SetRealHandle(h.key, std::nullopt);
  }
  // The cached descriptors keep the allocations alive in the driver; who fetched them is
  // what Reallocate asks.
  importers_ = cache_.LiveImporters(SelfIdentity());
  cache_.Clear();
  CUSNAP_LOG_INFO("release: %zu mappings unmapped in %.1f ms, %zu handles released in %.1f ms",
                  mappings_.size(), static_cast<double>(unmapped - start) / 1e6, held_.size(),
                  static_cast<double>(MonotonicNs() - unmapped) / 1e6);
  return Ok{};
}

Status UnicastSteps::MapAll(Held& held, CUmemGenericAllocationHandle real) {
  for (size_t k = 0; k < mappings_.size(); ++k) {
    const MappingInfo& m = mappings_[k];
    if (m.key != held.key) continue;
    Status mapped = MapOne(held, m, real);
    if (!mapped) {
      UnmapAll(held);  // all or nothing: a retry maps every range again
      return mapped;
    }
    held.mapped[k] = 1;
  }
  return Ok{};
}

Status UnicastSteps::MapOne(const Held& held, const MappingInfo& m,
                            CUmemGenericAllocationHandle real) {
  if (CUresult r = api_.cuMemMap(m.address, m.size, m.offset, real, 0); r != CUDA_SUCCESS) {
    return DriverError(r, "mapping " + DescribeObject(held.id) + " again at " +
                              VaRangeText(m.address, m.size));
  }
  if (m.access_count == 0) return Ok{};
  const auto access = AccessDescs(m);
  if (CUresult r = api_.cuMemSetAccess(m.address, m.size, access.data(), m.access_count);
      r != CUDA_SUCCESS) {
    api_.cuMemUnmap(m.address, m.size);
    return DriverError(r, "re-applying access to " + VaRangeText(m.address, m.size) + " of " +
                              DescribeObject(held.id));
  }
  return Ok{};
}

void UnicastSteps::UnmapAll(Held& held) {
  for (size_t k = 0; k < mappings_.size(); ++k) {
    if (!held.mapped[k]) continue;
    api_.cuMemUnmap(mappings_[k].address, mappings_[k].size);
    held.mapped[k] = 0;
  }
}

Status UnicastSteps::Rebuild(Held& held, CUmemGenericAllocationHandle real) {
  if (Status mapped = MapAll(held, real); !mapped) {
    api_.cuMemRelease(real);  // undone: a retry creates or imports it again
    return mapped;
  }
  // Logical handles name the table entry, so repointing it repoints all of them.
  table_.SetRealHandle(held.key, real);
  held.real = real;
  held.restored = true;
  return Ok{};
}

Result<StepResult> UnicastSteps::Reallocate() {
  // Bytes a dump wrote out come back first (kReadCarrier): nothing is rebuilt before.
  if (Status in_memory = carrier_.SavedBytesReadable(); !in_memory) return in_memory.error();
  if (Status released = ImportersReleased(); !released) return released.error();
  // Resumable: allocations an earlier, failed attempt rebuilt are kept; the carrier's bytes
  // are copied into every one again (the copy is idempotent), then exported once each.
  std::vector<CarrierSlot> slots;
  for (Held& h : held_) {
    if (!h.saved) continue;
    ContextScope scope(api_, h.context);
    if (scope.status() != CUDA_SUCCESS) return DriverError(scope.status(), "entering a context");
    if (!h.restored) {
      // The recorded ordinal as it is: a restore onto other GPUs keeps the process's
      // ordinals and changes the physical GPU behind them (DRIVER-FACTS F7), so the fresh
      // allocation lands where the natively restored memory of this ordinal now lives.
      const CUmemAllocationProp prop = h.prop;
      Result<CUdevice> device = DeviceOf(h.context);
      if (!device) return device.error();
      h.device = *device;
      CUmemGenericAllocationHandle real = 0;
      if (CUresult r = api_.cuMemCreate(&real, h.size, &prop, 0); r != CUDA_SUCCESS) {
        return DriverError(r, "creating " + DescribeObject(h.id) + " again (" +
                                  std::to_string(h.size) + " bytes)");
      }
      if (Status rebuilt = Rebuild(h, real); !rebuilt) return rebuilt.error();
    }
    slots.push_back(CarrierSlot{h.real, h.size, h.context, h.device,
                                h.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE});
  }
  Result<CarrierTransfer> transfer = carrier_.Load(slots);
  if (!transfer) return transfer.error();
  // Importers ask for these in the next phase (kImport), through the peer thread.
  for (Held& h : held_) {
    if (!h.saved || !h.shared || h.exported) continue;
    ContextScope scope(api_, h.context);
    int fd = -1;
    if (CUresult r = api_.cuMemExportToShareableHandle(
            &fd, h.real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        r != CUDA_SUCCESS) {
      return DriverError(r, "exporting " + DescribeObject(h.id) + " again");
    }
    cache_.Put(TicketKind::kUnicast, h.id.local_id, fd, h.size);
    h.exported = true;
  }
  return FromTransfer(*transfer);
}

Status UnicastSteps::ImportersReleased() {
  // An importer that did not release its import in this cycle (it resumed, or was never
  // quiesced: any client may send a creator its steps alone) still maps the old allocation,
  // which its handle keeps alive. A fresh one would split the pair: each process with memory
  // of its own, writes no longer seen across, and nothing a later step could join again.
  std::map<int, std::vector<proto::ObjectId>> asked;  // importer pid -> allocations
  std::map<int, uint64_t> started;                    // importer pid -> its start time
  for (const proto::Importer& importer : importers_) {
    if (importer.kind != static_cast<uint32_t>(TicketKind::kUnicast)) continue;
    for (const Held& h : held_) {
      if (!h.saved || !h.shared || h.restored || h.id.local_id != importer.id.local_id) continue;
      asked[importer.pid].push_back(h.id);
      started[importer.pid] = importer.start_time;
    }
  }
  for (const auto& [pid, ids] : asked) {
    Result<uint64_t> start = ProcessStartTimeOrShortage(pid);
    if (!start) {
      return Error{start.error().code, ThisProcess() + ": cannot tell whether its importer " +
                                           ProcessText(pid) + " still runs: " +
                                           start.error().message + "; nothing was created"};
    }
    if (*start != started[pid]) continue;  // exited: it holds nothing
    Result<std::vector<proto::ObjectId>> held = ask_held_(pid, ids);
    // Nothing listens where its endpoint was: its shim is gone with its address space (it
    // was killed and not reaped yet, or exec'd), and so are its mappings.
    if (!held && (held.error().code == ECONNREFUSED || held.error().code == ENOENT)) continue;
    if (!held) return Error{held.error().code, held.error().message + "; nothing was created"};
    if (held->empty()) continue;
    return Error{-1, ThisProcess() + ": its importer " + ProcessText(pid) + " still holds " +
                         DescribeObject(held->front()) + " from before this process released it "
                         "(it was not released with it): a fresh allocation would not be the "
                         "memory it maps; nothing was created: take " + ProcessText(pid) +
                         " through the checkpoint too ('cusnap recover' does), then reallocate"};
  }
  return Ok{};
}

Result<StepResult> UnicastSteps::WriteCarrier(const std::string& path) {
  Result<CarrierTransfer> written = carrier_.WriteFile(path);
  if (!written) return written.error();
  StepResult result = FromTransfer(*written);
  for (const FilePart& part : carrier_.file_parts()) {
    proto::CarrierFile file{part.name, part.bytes, {}};
    for (const FileChunk& c : part.chunks) {
      file.chunks.push_back({c.offset, c.bytes, c.digest.high, c.digest.low});
    }
    result.files.push_back(std::move(file));
  }
  return result;
}

Result<StepResult> UnicastSteps::ReadCarrier(const std::string& dir) {
  Result<CarrierTransfer> read = carrier_.ReadFile(dir);
  if (!read) return read.error();
  return FromTransfer(*read);
}

Status UnicastSteps::CheckDevicesAfterMove(const std::string& device_map) {
  return shim::CheckDevicesAfterMove(api_, device_map);
}

Result<bool> UnicastSteps::CreatorAlive(const proto::ObjectId& id) {
  Result<uint64_t> start = ProcessStartTimeOrShortage(id.creator_pid);
  if (!start) {
    return Error{start.error().code, ThisProcess() + ": cannot tell whether the creator of " +
                                         DescribeObject(id) + " still runs: " +
                                         start.error().message + "; nothing was dropped, retry "
                                         "once descriptors are free"};
  }
  return *start == id.creator_start && !Unreaped(id.creator_pid);
}

void UnicastSteps::Orphan(Held& held) {
  held.orphaned = true;
  std::string ranges;
  for (const MappingInfo& m : mappings_) {
    if (m.key != held.key) continue;
    table_.RemoveMappings(m.address, m.size);
    ranges += (ranges.empty() ? "" : ", ") + VaRangeText(m.address, m.size);
  }
  CUSNAP_LOG_ERROR("%s: %s cannot be imported again: its creator, pid %d, exited; its "
                   "mappings here stay unmapped: %s",
                   ThisProcess().c_str(), DescribeObject(held.id).c_str(),
                   static_cast<int>(held.id.creator_pid), ranges.empty() ? "none" : ranges.c_str());
}

Status UnicastSteps::Import() {
  // Resumable: allocations an earlier, failed attempt imported are kept. One whose creator
  // exited cannot come back: its mappings are dropped, named (the coordinator names them
  // too), and the rest is restored.
  // Where the phase's time goes (logged at info): descriptor round trips to the creators,
  // the driver's import, and mapping with access.
  uint64_t fetch_ns = 0, import_ns = 0, map_ns = 0, imports = 0;
  for (Held& h : held_) {
    if (h.creator || h.restored || h.orphaned) continue;
    Result<bool> alive = CreatorAlive(h.id);
    if (!alive) return alive.error();
    if (!*alive) {
      Orphan(h);
      continue;
    }
    uint64_t at = MonotonicNs();
    Result<UniqueFd> fd = fetch_(h.id, TicketKind::kUnicast, h.capability);
    if (!fd) return fd.error();
    fetch_ns += MonotonicNs() - at;
    at = MonotonicNs();
    ContextScope scope(api_, h.context);
    CUmemGenericAllocationHandle real = 0;
    const CUresult imported =
        scope.status() != CUDA_SUCCESS
            ? scope.status()
            : api_.cuMemImportFromShareableHandle(
                  &real, reinterpret_cast<void*>(static_cast<intptr_t>(fd->get())),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    fd->reset();  // never kept: the raw descriptor must not linger in the process
    if (imported != CUDA_SUCCESS) {
      return DriverError(imported, "importing " + DescribeObject(h.id) + " again");
    }
    import_ns += MonotonicNs() - at;
    at = MonotonicNs();
    if (Status rebuilt = Rebuild(h, real); !rebuilt) return rebuilt.error();
    map_ns += MonotonicNs() - at;
    ++imports;
  }
  CUSNAP_LOG_INFO("import: %llu allocations: descriptors from creators %.1f ms, driver import "
                  "%.1f ms, map and access %.1f ms",
                  static_cast<unsigned long long>(imports), static_cast<double>(fetch_ns) / 1e6,
                  static_cast<double>(import_ns) / 1e6, static_cast<double>(map_ns) / 1e6);
  return Ok{};
}

void UnicastSteps::Discard() {
  carrier_.Discard();
  held_.clear();
  mappings_.clear();
  unmapped_.clear();
  importers_.clear();
}

}  // namespace cusnap::shim
