// The multicast objects this process holds (internal to multicast*.cc): each one's team memfd
// and mapped team record, and the descriptors this process keeps open for the members it bound
// (other processes reach a member's bytes through /proc/<pid>/fd/<n> of such a descriptor).
//
// Lock order: vmm state mutex -> object table mutex; team record mutex -> binding descriptor
// mutex. The object table mutex is never held while a team record is locked.
#pragma once

#include "multicast_team.h"

#include <cstdint>
#include <memory>

namespace simcuda::multicast {

/// One multicast object held by this process.
struct Object {
  CUmemGenericAllocationHandle handle = 0;
  int fd = -1;                     // the team memfd (what export duplicates)
  team::Record *record = nullptr;  // mapped while any thread uses the object
  Object(CUmemGenericAllocationHandle h, int team_fd, team::Record *r) : handle(h), fd(team_fd), record(r) {}
  ~Object();
  Object(const Object &) = delete;
  Object &operator=(const Object &) = delete;
};

/// The object behind `handle`, or nullptr when this process holds no multicast object by it
/// (by handle or mapping: what test hooks accept).
std::shared_ptr<Object> find(CUmemGenericAllocationHandle handle);
/// The same, but only while `handle` is still a valid handle (not released): what the driver's
/// entry points accept.
std::shared_ptr<Object> find_live(CUmemGenericAllocationHandle handle);
/// Registers a new object of this process (taking `fd` and `record`) and counts this process
/// as one more holder in the team record.
void add(CUmemGenericAllocationHandle handle, int fd, team::Record *record);

/// Keeps `fd` (a member memfd descriptor) open for binding `serial` of team `team_id`.
void keep_binding_fd(uint64_t team_id, uint64_t serial, int fd);
/// Closes the descriptor kept for a binding of this process, if any.
void drop_binding_fd(uint64_t team_id, uint64_t serial);
/// Closes the descriptors of this process's bindings that the record no longer has (another
/// process unbound them). Call with the record locked.
void reap(const team::Record &record);

}  // namespace simcuda::multicast
