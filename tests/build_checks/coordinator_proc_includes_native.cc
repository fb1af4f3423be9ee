// Must not compile with the include root of the coordinator's proc room
// (tests/unit/include_roots.cmake): the native room sits above it (DESIGN.md, "Layout").
#include "coordinator/proc/processes.h"
#include "coordinator/native/device_map.h"
