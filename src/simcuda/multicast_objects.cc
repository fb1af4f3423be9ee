// The multicast objects of this process (multicast_objects.h) and how they cross processes
// (multicast.h: export, import, release).
#include "multicast.h"
#include "multicast_objects.h"

#include "config.h"
#include "vmm.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <utility>

namespace simcuda::multicast {
namespace {

struct Objects {
  std::mutex mutex;
  std::map<CUmemGenericAllocationHandle, std::shared_ptr<Object>> by_handle;
};

Objects &objects() {
  static Objects *o = new Objects;  // never destroyed: calls may run during exit
  return *o;
}

struct BindingFds {
  std::mutex mutex;
  std::map<std::pair<uint64_t, uint64_t>, int> fds;  // (team id, binding serial) -> descriptor
};

BindingFds &binding_fds() {
  static BindingFds *b = new BindingFds;
  return *b;
}

// Removes this process's bindings from the team (with their descriptors): it no longer holds
// the object. Call with the record locked.
void end_own_bindings(team::Record &record) {
  int self = getpid();
  for (team::Binding &b : record.bindings) {
    if (b.serial == 0 || b.pid != self) continue;
    drop_binding_fd(record.id, b.serial);
    b = team::Binding{};
  }
}

}  // namespace

Object::~Object() {
  team::unmap(record);
  close(fd);
}

std::shared_ptr<Object> find(CUmemGenericAllocationHandle handle) {
  Objects &o = objects();
  std::lock_guard lock(o.mutex);
  auto it = o.by_handle.find(handle);
  return it == o.by_handle.end() ? nullptr : it->second;
}

std::shared_ptr<Object> find_live(CUmemGenericAllocationHandle handle) {
  return vmm::handle_live(handle) ? find(handle) : nullptr;
}

void add(CUmemGenericAllocationHandle handle, int fd, team::Record *record) {
  {
    team::Lock lock(record);
    ++record->holders;
  }
  Objects &o = objects();
  std::lock_guard lock(o.mutex);
  o.by_handle[handle] = std::make_shared<Object>(handle, fd, record);
}

void keep_binding_fd(uint64_t team_id, uint64_t serial, int fd) {
  BindingFds &b = binding_fds();
  std::lock_guard lock(b.mutex);
  b.fds[{team_id, serial}] = fd;
}

void drop_binding_fd(uint64_t team_id, uint64_t serial) {
  BindingFds &b = binding_fds();
  std::lock_guard lock(b.mutex);
  auto it = b.fds.find({team_id, serial});
  if (it == b.fds.end()) return;
  if (it->second >= 0) close(it->second);
  b.fds.erase(it);
}

void reap(const team::Record &record) {
  BindingFds &b = binding_fds();
  std::lock_guard lock(b.mutex);
  for (auto it = b.fds.lower_bound({record.id, 0}); it != b.fds.end() && it->first.first == record.id;) {
    bool bound = false;
    for (const team::Binding &binding : record.bindings) bound = bound || binding.serial == it->first.second;
    if (bound) {
      ++it;
      continue;
    }
    if (it->second >= 0) close(it->second);
    it = b.fds.erase(it);
  }
}

void forget(CUmemGenericAllocationHandle handle) {
  std::shared_ptr<Object> object;
  {
    Objects &o = objects();
    std::lock_guard lock(o.mutex);
    auto it = o.by_handle.find(handle);
    if (it == o.by_handle.end()) return;
    object = std::move(it->second);
    o.by_handle.erase(it);
  }
  team::Lock lock(object->record);
  end_own_bindings(*object->record);
  reap(*object->record);
  --object->record->holders;
  team::changed(object->record);
}

size_t count() {
  Objects &o = objects();
  std::lock_guard lock(o.mutex);
  return o.by_handle.size();
}

bool holds(CUmemGenericAllocationHandle handle) { return find(handle) != nullptr; }

CUresult export_object(void *shareable, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                       unsigned long long flags) {
  std::shared_ptr<Object> object = find_live(handle);
  if (object == nullptr || shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // Only the handle types requested at creation can be exported (CUmulticastObjectProp::handleTypes).
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || (object->record->handle_types & type) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  int fd = fcntl(object->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int *>(shareable) = fd;
  return CUDA_SUCCESS;
}

bool is_object_descriptor(int fd) { return team::id_of(fd) != 0; }

CUresult import_object(CUmemGenericAllocationHandle *handle, int fd) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps (and closes) `fd`
  if (own < 0) return CUDA_ERROR_INVALID_VALUE;
  team::Record *record = team::map(own);
  if (record == nullptr) {
    close(own);
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool attached = false;
  CUresult r = vmm::adopt_multicast(handle, record->id, record->capacity, record->handle_types,
                                    [&](CUmemGenericAllocationHandle h) {
                                      add(h, own, record);
                                      attached = true;
                                    });
  if (!attached) {  // held here before: the existing handle was returned; this mapping is spare
    team::unmap(record);
    close(own);
  }
  return r;
}

CUresult wait_before_map(CUmemGenericAllocationHandle handle) {
  std::shared_ptr<Object> object = find_live(handle);
  if (object == nullptr) return CUDA_SUCCESS;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config().multicast_bind_timeout_ms);
  return team::wait_complete(object->record, deadline) ? CUDA_SUCCESS : CUDA_ERROR_TIMEOUT;
}

}  // namespace simcuda::multicast
