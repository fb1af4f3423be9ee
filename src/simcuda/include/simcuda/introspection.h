// Test-only introspection of the simulated driver (libcuda.so.1 from src/simcuda). Tests
// find these with dlsym on the driver (or link it directly). They describe the calling
// process only, except simcuda_test_ledger_bytes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// One mapping of this process: a VA range and the allocation behind it.
typedef struct simcuda_mapping_info {
  uint64_t va;                /* start of the mapping */
  uint64_t size;              /* bytes */
  uint64_t offset;            /* into the allocation, bytes */
  uint64_t allocation_id;     /* the same in every process holding the allocation */
  uint64_t allocation_handle; /* this process's CUmemGenericAllocationHandle */
  uint64_t allocation_size;   /* bytes */
  int location_type;          /* CUmemLocationType of the allocation */
  int location_id;            /* device ordinal (kept across a restore), or host NUMA node */
  int imported;               /* 1 when imported from a shareable handle */
  int native_cycled;          /* 1 after a native checkpoint/restore (export refused) */
  unsigned char access[9];    /* CUmemAccess_flags per device 0-7, then the host */
} simcuda_mapping_info;

/// Fills *out with the mapping containing `va`; 0 on success, -1 when `va` is not mapped.
int simcuda_test_mapping_at(uint64_t va, simcuda_mapping_info *out);

/// Copies up to `max` of this process's mappings (by ascending VA) into `out`; returns how
/// many mappings there are in all.
size_t simcuda_test_mappings(simcuda_mapping_info *out, size_t max);

/// Number of allocations this process holds (by handle or mapping), multicast ones included.
size_t simcuda_test_allocation_count(void);

/// Bytes of device memory this process holds on PHYSICAL GPU `device` (imported allocations
/// included). Physical GPU N is ordinal N until a restore onto other GPUs (DRIVER-FACTS F7).
uint64_t simcuda_test_bytes_in_use(int device);

/// Bytes in use on PHYSICAL GPU `device` by every live process, as cuMemGetInfo counts them.
uint64_t simcuda_test_ledger_bytes(int device);

/// Driver calls of this process in flight right now (0 when every thread is outside the driver).
int simcuda_test_calls_in_flight(void);

/// Makes the nth call (1 = the next) of entry point `api_name` (e.g. "cuMemCreate") fail with
/// CUresult `result` without doing anything.
void simcuda_test_inject_fault(const char *api_name, unsigned nth, int result);

/// A multicast object as its team (shared by every process holding it) records it.
typedef struct simcuda_multicast_info {
  uint64_t id;            /* the same in every process holding the object */
  uint64_t size;          /* CUmulticastObjectProp::size, bytes (what was requested) */
  uint64_t capacity;      /* bytes a device may bind or map (size rounded up under
                             SIMCUDA_MULTICAST_ROUND_BYTES) */
  uint64_t handle_types;  /* CUmulticastObjectProp::handleTypes */
  unsigned num_devices;   /* CUmulticastObjectProp::numDevices */
  unsigned devices_added; /* bit d: device d was added */
  unsigned bindings;      /* bindings of every device, in every process */
  unsigned holders;       /* processes holding a handle or mapping of it */
} simcuda_multicast_info;

/// One binding of a multicast object.
typedef struct simcuda_multicast_binding {
  int device;                 /* the device it is bound for */
  int pid;                    /* the process that bound it */
  uint64_t mc_offset;         /* bytes into the multicast object */
  uint64_t size;              /* bytes */
  uint64_t allocation_id;     /* the bound allocation */
  uint64_t allocation_offset; /* bytes into it */
} simcuda_multicast_binding;

/// Fills *out for multicast object `mc_handle` of this process; 0 on success, -1 when this
/// process holds no multicast object by that handle.
int simcuda_test_multicast_info(uint64_t mc_handle, simcuda_multicast_info *out);

/// Copies up to `max` bindings of the object (by ascending device, then offset) into `out`;
/// returns how many there are in all (0 for an unknown handle).
size_t simcuda_test_multicast_bindings(uint64_t mc_handle, simcuda_multicast_binding *out, size_t max);

/// Element types of simcuda_test_multimem_all_reduce.
enum { SIMCUDA_MULTIMEM_F32 = 0, SIMCUDA_MULTIMEM_U32 = 1 };

/// Stands in for a multimem all-reduce kernel on the multicast range [mc_offset,
/// mc_offset+size) of object `mc_handle` (held by this process): sums the elements (float32 or
/// uint32, `element_type`) of the memory every device of the team has bound there, and writes
/// the sums back into every one of them. Members may live in other processes: their bytes are
/// reached through the descriptors their binding processes keep (/proc/<pid>/fd/<n>). Any
/// process holding the object may call it; the team is locked meanwhile (binds and unbinds
/// wait). Returns a CUresult: CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE for an unknown handle, an
/// incomplete team, a range not a multiple of 4 bytes, outside the capacity, or not wholly
/// bound on every device of the team; CUDA_ERROR_NOT_SUPPORTED when a bound allocation keeps no
/// descriptor (imported, or not exportable as a POSIX descriptor); CUDA_ERROR_OPERATING_SYSTEM
/// when a binding's process is gone or its descriptor cannot be opened. The reason goes to
/// stderr, naming the process, device and allocation.
int simcuda_test_multimem_all_reduce(uint64_t mc_handle, uint64_t mc_offset, uint64_t size, int element_type);

#ifdef __cplusplus
}
#endif
