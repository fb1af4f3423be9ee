#include "shim/hooks/ticket_import.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/ticket.h"
#include "common/unique_fd.h"
#include "shim/driver/driver_api.h"
#include "shim/tables/handles.h"
#include "shim/tables/multicast_table.h"
#include "shim/hooks/multicast_vmm.h"
#include "shim/process.h"
#include "shim/tables/capabilities.h"

namespace cusnap::shim {
namespace {

// Bound on the whole round trip to a creator's endpoint (connect, request, reply).
constexpr int kExportRequestTimeoutMs = 30'000;

CUcontext CurrentContext() {
  CUcontext context = nullptr;
  if (auto get = driver().cuCtxGetCurrent) get(&context);
  return context;
}

void ReleaseReal(CUmemGenericAllocationHandle real) {
  if (auto release = driver().cuMemRelease) release(real);
}

// Imports a descriptor that is not a ticket: raw handle back, recorded as untracked.
CUresult ImportUntracked(CUmemGenericAllocationHandle* handle, int fd) {
  auto import = driver().cuMemImportFromShareableHandle;
  if (import == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUmemGenericAllocationHandle real = 0;
  const CUresult rc = import(&real, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (rc != CUDA_SUCCESS) return rc;
  if (IsTagged(real)) return RefuseTaggedRealHandle(real, "cuMemImportFromShareableHandle");
  RecordUntrackedImport(real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUSNAP_LOG_WARN("descriptor %d is not a cusnap ticket: imported untracked as handle 0x%llx "
                  "(checkpoint refuses this process until it is released)",
                  fd, static_cast<unsigned long long>(real));
  *handle = real;
  return CUDA_SUCCESS;
}

// A fresh raw descriptor for `ticket` from its creator's endpoint (`*size` gets the
// allocation's size in bytes).
CUresult FetchDescriptor(const Ticket& ticket, UniqueFd* raw_fd, uint64_t* size) {
  const ProcessIdentity self = SelfIdentity();
  const proto::ObjectId& id = ticket.id;
  if (id.creator_pid == self.pid) {
    // Self-import of an allocation this process no longer holds (it would have aliased):
    // the cache has nothing either, but ask it rather than our own socket.
    if (id.creator_start != self.start_time) {
      CUSNAP_LOG_ERROR("ticket names %s, an earlier process with this pid (this one started "
                       "at %llu)", DescribeObject(id).c_str(),
                       static_cast<unsigned long long>(self.start_time));
      return CUDA_ERROR_INVALID_HANDLE;
    }
    if (!IsCapabilityOf(ticket.capability, ticket.kind, id.local_id)) {
      CUSNAP_LOG_ERROR("ticket names %s with a capability this process never gave it",
                       DescribeObject(id).c_str());
      return CUDA_ERROR_INVALID_HANDLE;
    }
    raw_fd->reset(export_cache().Dup(ticket.kind, id.local_id, size));
    if (!raw_fd->valid()) {
      CUSNAP_LOG_ERROR("ticket names %s, which this process released", DescribeObject(id).c_str());
      return CUDA_ERROR_INVALID_HANDLE;
    }
    return CUDA_SUCCESS;
  }
  Result<uint64_t> looked_up = ProcessStartTimeOrShortage(id.creator_pid);
  if (!looked_up) {
    CUSNAP_LOG_ERROR("import of %s: %s", DescribeObject(id).c_str(),
                     looked_up.error().message.c_str());
    return CUDA_ERROR_OPERATING_SYSTEM;  // no verdict on the creator: the caller may retry
  }
  const uint64_t now_start = *looked_up;
  if (now_start != id.creator_start) {
    CUSNAP_LOG_ERROR("ticket names %s, but that process is gone (%s)", DescribeObject(id).c_str(),
                     now_start == 0 ? "no such process"
                                    : "its pid now belongs to a process started later");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Result<proto::ExportReply> reply =
      RequestExport(id, static_cast<uint32_t>(ticket.kind), ticket.capability,
                    kExportRequestTimeoutMs);
  if (!reply.ok()) {
    CUSNAP_LOG_ERROR("import: %s", reply.error().message.c_str());
    // The creator refusing the allocation is a dead handle; anything else is the socket.
    return reply.error().code == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_HANDLE
                                                           : CUDA_ERROR_OPERATING_SYSTEM;
  }
  *raw_fd = std::move(reply->fd);
  *size = reply->size;
  return CUDA_SUCCESS;
}

// What the driver says of exporting `real` as `type` with `flags` when that is not the plain
// POSIX export a ticket stands for (flags=1, or FABRIC of a POSIX-only allocation, is the
// driver's CUDA_ERROR_INVALID_VALUE, not a ticket nor 801). The driver's error as
// it is; CUDA_SUCCESS to go on with a ticket (POSIX with flags the driver accepted); for
// another type the driver accepts, CUDA_ERROR_NOT_SUPPORTED (that handle would share the
// allocation behind cusnap's back), what the driver made discarded.
CUresult CheckExportArguments(CUmemGenericAllocationHandle real, CUmemAllocationHandleType type,
                              unsigned long long flags) {
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && flags == 0) return CUDA_SUCCESS;
  auto export_real = driver().cuMemExportToShareableHandle;
  if (export_real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  alignas(8) unsigned char scratch[sizeof(CUmemFabricHandle)] = {};  // the largest kind
  const CUresult rc = export_real(scratch, real, type, flags);
  if (rc != CUDA_SUCCESS) return rc;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    int fd = -1;
    std::memcpy(&fd, scratch, sizeof fd);
    close(fd);
    return CUDA_SUCCESS;
  }
  CUSNAP_LOG_ERROR("cuMemExportToShareableHandle: handle type %d of a tracked allocation is not "
                   "supported (only POSIX file descriptors)", static_cast<int>(type));
  return CUDA_ERROR_NOT_SUPPORTED;
}

// Multicast half of ExportTicket: the creator exports the object's real descriptor once into
// the export cache; the ticket carries the requested properties (ticket.h).
CUresult ExportMulticastTicket(uint64_t handle, void* shareable, CUmemAllocationHandleType type,
                               unsigned long long flags) {
  std::optional<MulticastPinned> pin = multicast_table().Pin(handle);
  if (!pin) return CUDA_ERROR_INVALID_HANDLE;
  struct Unpin {
    MulticastKey key;
    ~Unpin() {
      if (auto dropped = multicast_table().Unpin(key)) ReleaseDropped(*dropped, TicketKind::kMulticast);
    }
  } unpin{pin->key};
  if (!pin->has_real) return CUDA_ERROR_NOT_READY;
  if (CUresult rc = CheckExportArguments(pin->real, type, flags); rc != CUDA_SUCCESS) return rc;
  if (pin->creator && !export_cache().Contains(TicketKind::kMulticast, pin->id.local_id)) {
    auto export_real = driver().cuMemExportToShareableHandle;
    if (export_real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    int raw_fd = -1;
    const CUresult rc = export_real(&raw_fd, pin->real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) return rc;
    export_cache().Put(TicketKind::kMulticast, pin->id.local_id, raw_fd, pin->prop.size);
  }
  Ticket ticket;
  ticket.id = pin->id;
  ticket.kind = TicketKind::kMulticast;
  ticket.capability = pin->capability;
  ticket.multicast = TicketMulticastProperties{pin->prop.size, pin->prop.handle_types,
                                               pin->prop.flags, pin->prop.num_devices};
  Result<int> fd = CreateTicket(ticket);
  if (!fd.ok()) {
    CUSNAP_LOG_ERROR("cannot make a ticket for %s: %s",
                     DescribeObject(pin->id, "multicast object").c_str(), fd.error().message.c_str());
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  multicast_table().MarkShared(pin->key);
  *static_cast<int*>(shareable) = *fd;
  return CUDA_SUCCESS;
}

// The ticket's object imported into the driver from a fresh descriptor of its creator's
// (FetchDescriptor), the descriptor closed at once: the raw descriptor never stays in this
// process's table (DESIGN.md, "Tickets"). `what` names the object in the log ("allocation",
// "multicast object"); `*size` gets its size in bytes.
CUresult ImportFromCreator(const Ticket& ticket, const char* what,
                           CUmemGenericAllocationHandle* real, uint64_t* size) {
  UniqueFd raw_fd;
  CUresult rc = FetchDescriptor(ticket, &raw_fd, size);
  if (rc != CUDA_SUCCESS) return rc;
  auto import = driver().cuMemImportFromShareableHandle;
  rc = import != nullptr
           ? import(real, reinterpret_cast<void*>(static_cast<intptr_t>(raw_fd.get())),
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
           : CUDA_ERROR_NOT_INITIALIZED;
  raw_fd.reset();
  if (rc != CUDA_SUCCESS) {
    CUSNAP_LOG_ERROR("import of %s: the driver refused the creator's descriptor: %s",
                     DescribeObject(ticket.id, what).c_str(), ResultText(driver(), rc).c_str());
  }
  return rc;
}

// Multicast half of ImportShareable: one real handle per object per process (aliases), else a
// fresh descriptor from the creator, imported and closed at once.
CUresult ImportMulticastTicket(CUmemGenericAllocationHandle* handle, const Ticket& ticket) {
  if (ticket.multicast.size == 0 || ticket.multicast.num_devices == 0) {
    CUSNAP_LOG_ERROR("ticket names %s with size %llu and %u devices (both must be nonzero)",
                     DescribeObject(ticket.id, "multicast object").c_str(),
                     static_cast<unsigned long long>(ticket.multicast.size),
                     ticket.multicast.num_devices);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (std::optional<uint64_t> alias = multicast_table().AliasById(ticket.id)) {
    *handle = *alias;
    return CUDA_SUCCESS;
  }
  CUmemGenericAllocationHandle real = 0;
  uint64_t size = 0;
  const CUresult rc = ImportFromCreator(ticket, "multicast object", &real, &size);
  if (rc != CUDA_SUCCESS) return rc;
  if (IsTagged(real)) return RefuseTaggedRealHandle(real, "cuMemImportFromShareableHandle");
  const MulticastProperties prop{ticket.multicast.num_devices, ticket.multicast.size,
                                 ticket.multicast.handle_types, ticket.multicast.flags};
  bool duplicate = false;
  const uint64_t logical =
      multicast_table().AddImported(ticket.id, ticket.capability, real, prop, CurrentContext(), &duplicate);
  if (duplicate || logical == 0) ReleaseReal(real);
  if (logical == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = logical;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult ExportTicket(uint64_t handle, void* shareable, CUmemAllocationHandleType type,
                      unsigned long long flags) {
  if (IsMulticastHandle(handle)) return ExportMulticastTicket(handle, shareable, type, flags);
  PinScope pin(handle);
  if (!pin) return CUDA_ERROR_INVALID_HANDLE;
  if (!pin->has_real) return CUDA_ERROR_NOT_READY;
  if (CUresult rc = CheckExportArguments(pin->real, type, flags); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = CacheCreatorExport(*pin); rc != CUDA_SUCCESS) return rc;
  Ticket ticket;
  ticket.id = pin->id;  // an importer's ticket names the original creator
  ticket.kind = TicketKind::kUnicast;
  ticket.capability = pin->capability;  // and carries the creator's capability on
  Result<int> fd = CreateTicket(ticket);
  if (!fd.ok()) {
    CUSNAP_LOG_ERROR("cannot make a ticket for %s: %s", DescribeObject(pin->id).c_str(),
                     fd.error().message.c_str());
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *static_cast<int*>(shareable) = *fd;
  return CUDA_SUCCESS;
}

CUresult CacheCreatorExport(const Pinned& pin) {
  if (pin.creator && !export_cache().Contains(TicketKind::kUnicast, pin.id.local_id)) {
    auto export_real = driver().cuMemExportToShareableHandle;
    if (export_real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
    int raw_fd = -1;
    const CUresult rc = export_real(&raw_fd, pin.real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS) return rc;
    export_cache().Put(TicketKind::kUnicast, pin.id.local_id, raw_fd, pin.size);
  }
  table().MarkShared(pin.key, CurrentContext());
  return CUDA_SUCCESS;
}

void RecordUntrackedImport(CUmemGenericAllocationHandle real, CUmemAllocationHandleType type) {
  CUmemAllocationProp prop{};
  auto get_prop = driver().cuMemGetAllocationPropertiesFromHandle;
  const bool known = get_prop != nullptr && get_prop(&prop, real) == CUDA_SUCCESS;
  table().CountUntrackedImport(real, known ? &prop : nullptr, type);
}

CUresult ImportShareable(CUmemGenericAllocationHandle* handle, int fd) {
  Result<std::optional<Ticket>> read = ReadTicket(fd);
  if (!read.ok()) {
    CUSNAP_LOG_ERROR("descriptor %d: %s", fd, read.error().message.c_str());
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!read->has_value()) return ImportUntracked(handle, fd);
  const Ticket ticket = **read;
  if (ticket.kind == TicketKind::kMulticast) return ImportMulticastTicket(handle, ticket);
  return ImportAllocation(ticket.id, ticket.capability, handle);
}

CUresult ImportAllocation(const proto::ObjectId& id, const proto::Capability& capability,
                          CUmemGenericAllocationHandle* handle) {
  // One real handle per allocation per process: a repeated import (or an import of our own
  // ticket) aliases what the table holds, with no round trip.
  if (std::optional<uint64_t> alias = table().AliasById(id)) {
    *handle = *alias;
    return CUDA_SUCCESS;
  }
  Ticket ticket;
  ticket.id = id;
  ticket.kind = TicketKind::kUnicast;
  ticket.capability = capability;
  CUmemGenericAllocationHandle real = 0;
  uint64_t size = 0;
  const CUresult rc = ImportFromCreator(ticket, "allocation", &real, &size);
  if (rc != CUDA_SUCCESS) return rc;
  CUmemAllocationProp prop{};
  if (auto get_prop = driver().cuMemGetAllocationPropertiesFromHandle) get_prop(&prop, real);
  bool duplicate = false;
  const uint64_t logical = table().AddImported(ticket.id, ticket.capability, real, size, prop, CurrentContext(),
                                               &duplicate);
  if (duplicate || logical == 0) ReleaseReal(real);
  if (logical == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = logical;
  return CUDA_SUCCESS;
}

}  // namespace cusnap::shim
