// Multicast lifecycle work (multicast_steps.h).
#include "shim/lifecycle/multicast_steps.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/text.h"
#include "common/ticket.h"
#include "shim/driver/context_scope.h"
#include "shim/lifecycle/lifecycle_common.h"

namespace cusnap::shim {
namespace {

// Short, as the coordinator names objects: a reply's text holds 184 bytes (protocol.h).
std::string Name(const proto::ObjectId& id) {
  return "multicast object " + std::to_string(id.local_id) + " of " + ProcessText(id.creator_pid);
}

// "cuMulticastBindMem_v2 of device 1 at offset 0": the call that (re)makes binding `b`.
std::string BindCall(const MulticastBinding& b) {
  return std::string(b.kind == BindKind::kMem ? "cuMulticastBindMem" : "cuMulticastBindAddr") +
         (b.api == 2 ? "_v2" : "") + " of device " + std::to_string(b.device) + " at offset " +
         std::to_string(b.mc_offset);
}

// "pid P: <call> failed with CUDA_ERROR_X (N) for <object>": the call first, so that the
// step's name (added by the lifecycle and the coordinator), the CUresult and the object all
// fit in a reply's text.
Error StepError(CUresult result, const std::string& call, const proto::ObjectId& object) {
  return Error{static_cast<int>(result), ThisProcess() + ": " + call + " failed with " +
                                             ResultText(driver(), result) + " for " +
                                             Name(object)};
}

// Enters `context` when one was recorded (the VMM and multicast calls need none; a v1
// BindAddr binds for the current context's device).
struct OptionalContext {
  std::optional<ContextScope> scope;
  OptionalContext(const DriverApi& api, CUcontext context) {
    if (context != nullptr) scope.emplace(api, context);
  }
  CUresult status() const { return scope ? scope->status() : CUDA_SUCCESS; }
};

}  // namespace

MulticastSteps::MulticastSteps(const DriverApi& api, SharingTable& table,
                               MulticastTable& multicast, ExportCache& cache,
                               ExportFetcher fetch)
    : api_(api), table_(table), multicast_(multicast), cache_(cache), fetch_(fetch) {}

const MulticastObjectInfo* MulticastSteps::Find(MulticastKey key) const {
  for (const MulticastObjectInfo& o : held_) {
    if (o.key == key) return &o;
  }
  return nullptr;
}

Status MulticastSteps::Unbind(const MulticastObjectInfo& object, const MulticastBinding& b) {
  if (CUresult r = api_.cuMulticastUnbind(object.real, b.device, b.mc_offset, b.size);
      r != CUDA_SUCCESS) {
    return StepError(r, "cuMulticastUnbind of device " + std::to_string(b.device) + " at offset " +
                            std::to_string(b.mc_offset), object.id);
  }
  return Ok{};
}

Status MulticastSteps::BindOne(const MulticastObjectInfo& object, const MulticastBinding& b) {
  const CUdevice device = b.device;  // ordinals survive a restore onto other GPUs (F7)
  CUresult r = CUDA_SUCCESS;
  if (b.kind == BindKind::kMem) {
    CUmemGenericAllocationHandle member = b.untracked_member;
    if (b.tracked_member) {
      // The member's CURRENT real handle: reallocate/import gave it a fresh one.
      std::optional<CUmemGenericAllocationHandle> current;
      for (const AllocationInfo& a : table_.Allocations()) {
        if (a.id == b.member && a.has_real) current = a.real;
      }
      if (!current) {
        return Error{CUDA_ERROR_INVALID_HANDLE,
                     ThisProcess() + ": " + BindCall(b) + ": its member " + DescribeObject(b.member) +
                         " has no driver handle, for " + Name(object.id)};
      }
      member = *current;
    }
    r = b.api == 2 ? (api_.cuMulticastBindMem_v2 == nullptr
                          ? CUDA_ERROR_NOT_SUPPORTED
                          : api_.cuMulticastBindMem_v2(object.real, device, b.mc_offset, member,
                                                       b.member_offset, b.size, b.flags))
                   : api_.cuMulticastBindMem(object.real, b.mc_offset, member, b.member_offset,
                                             b.size, b.flags);
  } else if (b.api == 2) {
    r = api_.cuMulticastBindAddr_v2 == nullptr
            ? CUDA_ERROR_NOT_SUPPORTED
            : api_.cuMulticastBindAddr_v2(object.real, device, b.mc_offset, b.address, b.size,
                                          b.flags);
  } else {
    // v1 binds for the current context's device: the one current at the original bind.
    OptionalContext scope(api_, b.context);
    r = scope.status() != CUDA_SUCCESS
            ? scope.status()
            : api_.cuMulticastBindAddr(object.real, b.mc_offset, b.address, b.size, b.flags);
  }
  if (r != CUDA_SUCCESS) return StepError(r, BindCall(b), object.id);
  return Ok{};
}

Status MulticastSteps::MapOne(const MulticastObjectInfo& object, const MulticastMapping& m) {
  if (CUresult r = api_.cuMemMap(m.address, m.size, m.offset, object.real, m.flags);
      r != CUDA_SUCCESS) {
    return StepError(r, "cuMemMap at " + VaRangeText(m.address, m.size), object.id);
  }
  if (m.access_count == 0) return Ok{};
  const auto access = AccessDescs(m);
  if (CUresult r = api_.cuMemSetAccess(m.address, m.size, access.data(), m.access_count);
      r != CUDA_SUCCESS) {
    // All or nothing: a range left mapped without its access would make a retry's cuMemMap
    // fail on an occupied range.
    api_.cuMemUnmap(m.address, m.size);
    return StepError(r, "cuMemSetAccess at " + VaRangeText(m.address, m.size), object.id);
  }
  return Ok{};
}

bool MulticastSteps::Undo(
    const std::vector<const MulticastMapping*>& unmapped,
    const std::vector<std::pair<const MulticastObjectInfo*, const MulticastBinding*>>& unbound) {
  // The team's devices are all still added (every handle is still held), so binds return at
  // once; mappings go back with their access.
  bool ok = true;
  for (auto it = unbound.rbegin(); it != unbound.rend(); ++it) {
    if (Status s = BindOne(*it->first, *it->second); !s) {
      CUSNAP_LOG_ERROR("undoing DETACH_MULTICAST: %s", s.error().message.c_str());
      ok = false;
    }
  }
  for (auto it = unmapped.rbegin(); it != unmapped.rend(); ++it) {
    const MulticastObjectInfo* object = Find((*it)->key);
    if (object == nullptr) continue;
    if (Status s = MapOne(*object, **it); !s) {
      CUSNAP_LOG_ERROR("undoing DETACH_MULTICAST: %s", s.error().message.c_str());
      ok = false;
    }
  }
  return ok;
}

Status MulticastSteps::DetachMulticast() {
  // A retry after a failure that released something: the mappings and bindings are gone
  // already, only the handles still held are left to release.
  if (destroyed_ && !held_.empty()) return ReleaseHeld();
  destroyed_ = false;
  held_ = multicast_.Objects();
  mappings_ = multicast_.Mappings();
  ResetProgress();
  // Checks first: nothing is touched when one fails.
  for (const MulticastObjectInfo& o : held_) {
    if (!o.has_real) {
      return Error{CUDA_ERROR_INVALID_HANDLE,
                   ThisProcess() + ": " + Name(o.id) + " has no driver handle while ACTIVE"};
    }
  }
  std::vector<const MulticastMapping*> unmapped;
  std::vector<std::pair<const MulticastObjectInfo*, const MulticastBinding*>> unbound;
  // Each failure before the first release puts back what was undone: the team stays intact.
  const auto refuse = [&](const Error& error) -> Status {
    if (Undo(unmapped, unbound)) return error;
    destroyed_ = true;
    return Error{error.code, error.message + "; putting the team back failed too"};
  };
  for (const MulticastMapping& m : mappings_) {
    const MulticastObjectInfo* object = Find(m.key);
    if (object == nullptr) continue;
    OptionalContext scope(api_, object->context);
    const CUresult r = scope.status() != CUDA_SUCCESS ? scope.status() : api_.cuMemUnmap(m.address, m.size);
    if (r != CUDA_SUCCESS) {
      return refuse(StepError(r, "cuMemUnmap at " + VaRangeText(m.address, m.size), object->id));
    }
    unmapped.push_back(&m);
  }
  for (const MulticastObjectInfo& o : held_) {
    for (const MulticastBinding& b : o.bindings) {
      if (Status s = Unbind(o, b); !s) return refuse(s.error());
      unbound.emplace_back(&o, &b);
    }
  }
  if (Status released = ReleaseHeld(); !released) {
    return destroyed_ ? released : refuse(released.error());
  }
  return Ok{};
}

Status MulticastSteps::ReleaseHeld() {
  for (MulticastObjectInfo& o : held_) {
    if (!o.has_real) continue;  // released by an earlier attempt
    // The creator's cached descriptor keeps the object alive in the driver.
    if (o.creator) cache_.Invalidate(TicketKind::kMulticast, o.id.local_id);
    if (CUresult r = api_.cuMemRelease(o.real); r != CUDA_SUCCESS) {
      return StepError(r, "cuMemRelease", o.id);
    }
    destroyed_ = true;
    multicast_.SetRealHandle(o.key, std::nullopt);
    o.has_real = false;
  }
  return Ok{};
}

void MulticastSteps::ResetProgress() {
  joined_.assign(held_.size(), {});
  bound_.assign(held_.size(), {});
  for (size_t i = 0; i < held_.size(); ++i) {
    joined_[i].assign(held_[i].devices.size(), 0);
    bound_[i].assign(held_[i].bindings.size(), 0);
  }
  mapped_.assign(mappings_.size(), 0);
}

Status MulticastSteps::MulticastCreate() {
  // Resumable: objects an earlier attempt created (and exported) are kept.
  for (MulticastObjectInfo& o : held_) {
    if (!o.creator || o.has_real) continue;
    OptionalContext scope(api_, o.context);
    const CUmulticastObjectProp prop = o.prop.ToDriver();
    CUmemGenericAllocationHandle real = 0;
    CUresult r = scope.status() != CUDA_SUCCESS ? scope.status() : api_.cuMulticastCreate(&real, &prop);
    if (r != CUDA_SUCCESS) {
      return StepError(r, "cuMulticastCreate", o.id);
    }
    if (o.shared) {
      // Members ask for it in the next phase, through the peer thread.
      int fd = -1;
      r = api_.cuMemExportToShareableHandle(&fd, real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (r != CUDA_SUCCESS) {
        api_.cuMemRelease(real);  // undone: a retry creates it again
        return StepError(r, "cuMemExportToShareableHandle", o.id);
      }
      cache_.Put(TicketKind::kMulticast, o.id.local_id, fd, o.prop.size);
    }
    multicast_.SetRealHandle(o.key, real);
    o.real = real;
    o.has_real = true;
  }
  return Ok{};
}

Status MulticastSteps::MulticastImport() {
  for (MulticastObjectInfo& o : held_) {
    if (o.creator || o.has_real) continue;  // has_real: imported by an earlier attempt
    Result<UniqueFd> fd = fetch_(o.id, TicketKind::kMulticast, o.capability);
    if (!fd) {
      return fd.error();
    }
    CUmemGenericAllocationHandle real = 0;
    const CUresult r = api_.cuMemImportFromShareableHandle(
        &real, reinterpret_cast<void*>(static_cast<intptr_t>(fd->get())),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    fd->reset();  // never kept: the raw descriptor must not linger in the process
    if (r != CUDA_SUCCESS) return StepError(r, "cuMemImportFromShareableHandle", o.id);
    multicast_.SetRealHandle(o.key, real);
    o.real = real;
    o.has_real = true;
  }
  return Ok{};
}

Status MulticastSteps::MulticastJoin() {
  // Resumable: devices an earlier attempt added are not added twice.
  for (size_t i = 0; i < held_.size(); ++i) {
    const MulticastObjectInfo& o = held_[i];
    for (size_t d = 0; d < o.devices.size(); ++d) {
      if (joined_[i][d]) continue;
      const int device = o.devices[d];
      if (CUresult r = api_.cuMulticastAddDevice(o.real, device); r != CUDA_SUCCESS) {
        return StepError(r, "cuMulticastAddDevice of device " + std::to_string(device), o.id);
      }
      joined_[i][d] = 1;
    }
  }
  return Ok{};
}

Status MulticastSteps::MulticastBind() {
  // Binds wait until the whole team was added: the coordinator ran kMulticastJoin in every
  // member first (its barrier). Resumable: what an earlier attempt bound or mapped is kept.
  for (size_t i = 0; i < held_.size(); ++i) {
    const MulticastObjectInfo& o = held_[i];
    for (size_t b = 0; b < o.bindings.size(); ++b) {
      if (bound_[i][b]) continue;
      if (Status s = BindOne(o, o.bindings[b]); !s) return s;
      bound_[i][b] = 1;
    }
  }
  for (size_t k = 0; k < mappings_.size(); ++k) {
    const MulticastObjectInfo* object = Find(mappings_[k].key);
    if (object == nullptr || mapped_[k]) continue;
    if (Status s = MapOne(*object, mappings_[k]); !s) return s;
    mapped_[k] = 1;
  }
  return Ok{};
}

void MulticastSteps::DropMulticast(const std::vector<proto::ObjectId>& teams) {
  for (size_t i = held_.size(); i-- > 0;) {
    MulticastObjectInfo& o = held_[i];
    if (std::none_of(teams.begin(), teams.end(),
                     [&](const proto::ObjectId& t) { return t == o.id; })) {
      continue;
    }
    if (o.has_real) {
      if (o.creator) cache_.Invalidate(TicketKind::kMulticast, o.id.local_id);
      api_.cuMemRelease(o.real);  // a team that cannot be completed: nothing waits on it
      multicast_.SetRealHandle(o.key, std::nullopt);
    }
    std::string ranges;
    for (size_t k = mappings_.size(); k-- > 0;) {
      if (mappings_[k].key != o.key) continue;
      ranges = VaRangeText(mappings_[k].address, mappings_[k].size) + (ranges.empty() ? "" : ", ") + ranges;
      mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(k));
      mapped_.erase(mapped_.begin() + static_cast<std::ptrdiff_t>(k));
    }
    multicast_.Drop(o.key);
    CUSNAP_LOG_ERROR("%s: %s is not rebuilt: a member of its team exited; its multicast "
                     "mappings here stay unmapped: %s",
                     ThisProcess().c_str(), Name(o.id).c_str(), ranges.empty() ? "none" : ranges.c_str());
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    joined_.erase(joined_.begin() + static_cast<std::ptrdiff_t>(i));
    bound_.erase(bound_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void MulticastSteps::Discard() {
  held_.clear();
  mappings_.clear();
  ResetProgress();
  // destroyed_ stays until the next DetachMulticast: a failed SAVE also discards, and the kResume
  // that follows must still be refused when the team was taken apart.
}

}  // namespace cusnap::shim
