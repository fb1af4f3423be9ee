// The shared state of one multicast object (its "team"): a small memfd mapped MAP_SHARED by
// every process that holds the object, so a team created in one process and imported in others
// (cuMemExportToShareableHandle / cuMemImportFromShareableHandle with POSIX descriptors) is one
// team: the devices added, the bindings of every device, the requested size and the capacity.
//
// The memfd is named "simcuda-mcast:<id>" (an importer recognises it from the descriptor alone,
// like an allocation's "simcuda-alloc:" memfd). Its record is guarded by a robust process-shared
// mutex (a process that dies holding it does not wedge the team); waiters for the team (binds,
// cuMemMap) sleep on a futex word that every change bumps.
#pragma once

#include "cuda_api.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace simcuda::multicast::team {

/// Bindings one object can hold across every process and device.
inline constexpr size_t kMaxBindings = 256;

/// One bind, as every process of the team sees it.
struct Binding {
  uint64_t serial = 0;  // 0: slot free; otherwise unique within the team
  int32_t device = -1;  // the device the memory is bound for
  int32_t pid = 0;      // the process that bound it (and keeps `member_fd` open)
  uint64_t mc_offset = 0;
  uint64_t size = 0;           // bytes
  uint64_t member_id = 0;      // the bound allocation's id (the same in every process)
  uint64_t member_offset = 0;  // bytes into the bound allocation
  int32_t member_fd = -1;      // in process `pid`: a descriptor of the allocation's memfd, -1 if none
  int32_t unused = 0;
};

/// The record at the start of the team memfd.
struct Record {
  uint32_t magic;
  uint32_t version;
  pthread_mutex_t mutex;            // guards everything below
  std::atomic<uint32_t> changes;    // futex word: bumped on every change of devices or bindings
  uint32_t num_devices;             // CUmulticastObjectProp::numDevices
  uint64_t id;                      // the object's id in every process
  uint64_t size;                    // CUmulticastObjectProp::size, bytes (what was requested)
  uint64_t capacity;                // bytes a device may bind/map: size, or rounded up (config.h)
  uint64_t handle_types;            // CUmulticastObjectProp::handleTypes
  uint32_t device_mask;             // bit d: device d was added
  uint32_t holders;                 // processes holding a handle or mapping of the object
  uint64_t next_serial;
  Binding bindings[kMaxBindings];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the futex word must be a plain 32-bit word");

/// Makes a new team memfd (close-on-exec) with a zeroed record for `prop`, `capacity` bytes per
/// device and id `id`; returns the descriptor and maps the record at *record. -1 (errno set)
/// when the host cannot provide it.
int create(uint64_t id, const CUmulticastObjectProp &prop, size_t capacity, Record **record);
/// When `fd` is a team memfd: its object id (from the memfd name); 0 otherwise.
uint64_t id_of(int fd);
/// Maps the record of team memfd `fd`; nullptr when `fd` is not one.
Record *map(int fd);
/// Unmaps a record mapped by create() or map().
void unmap(Record *record);

/// Holds the record's mutex (recovering it when its last owner died while holding it).
class Lock {
 public:
  explicit Lock(Record *record);
  ~Lock();
  Lock(const Lock &) = delete;
  Lock &operator=(const Lock &) = delete;

 private:
  Record *record_;
};

/// Number of devices added so far (call with the record locked).
unsigned devices_added(const Record &record);
/// Wakes every process waiting for this team (call with the record locked, after a change).
void changed(Record *record);
/// Waits until every device of the team was added or `deadline` passed (record not locked by
/// the caller); true when the team is complete.
bool wait_complete(Record *record, std::chrono::steady_clock::time_point deadline);

}  // namespace simcuda::multicast::team
