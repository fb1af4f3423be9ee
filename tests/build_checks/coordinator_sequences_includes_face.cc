// Must not compile with the include root of the coordinator's sequences room
// (tests/unit/include_roots.cmake): the face (coordinator.h) sits above it (DESIGN.md, "Layout").
#include "coordinator/sequences/sequence.h"
#include "coordinator/coordinator.h"
