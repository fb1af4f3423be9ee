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
  int location_id;            /* device ordinal, or host NUMA node */
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

/// Bytes of device memory this process holds on `device` (imported allocations included).
uint64_t simcuda_test_bytes_in_use(int device);

/// Bytes in use on `device` by every live process, as cuMemGetInfo counts them.
uint64_t simcuda_test_ledger_bytes(int device);

/// Driver calls of this process in flight right now (0 when every thread is outside the driver).
int simcuda_test_calls_in_flight(void);

/// Makes the nth call (1 = the next) of entry point `api_name` (e.g. "cuMemCreate") fail with
/// CUresult `result` without doing anything.
void simcuda_test_inject_fault(const char *api_name, unsigned nth, int result);

#ifdef __cplusplus
}
#endif
