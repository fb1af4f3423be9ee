// Must not compile with the shim's include root (tests/unit/include_roots.cmake): the shim
// never depends on the coordinator. The shim's own headers are reachable, the coordinator's
// are not.
#include "shim/tables/sharing_table.h"
#include "coordinator/coordinator.h"
