// Must not compile with the include root of the coordinator's images room
// (tests/unit/include_roots.cmake): the sequences room sits above it (DESIGN.md, "Layout").
#include "coordinator/images/manifest.h"
#include "coordinator/sequences/commands.h"
