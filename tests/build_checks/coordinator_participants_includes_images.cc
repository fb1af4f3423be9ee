// Must not compile with the include root of the coordinator's participants room
// (tests/unit/include_roots.cmake): the images room sits above it (DESIGN.md, "Layout").
#include "coordinator/participants/participant.h"
#include "coordinator/images/manifest.h"
