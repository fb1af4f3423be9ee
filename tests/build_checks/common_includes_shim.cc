// Must not compile with common's include root (tests/unit/include_roots.cmake): common is
// the bottom layer and includes neither the shim nor the coordinator.
#include "common/protocol.h"
#include "shim/process.h"
