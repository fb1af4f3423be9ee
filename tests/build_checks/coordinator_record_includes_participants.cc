// Must not compile with the include root of the coordinator's record room
// (tests/unit/include_roots.cmake): the participants room sits above it (DESIGN.md, "Layout").
#include "coordinator/record/state_file.h"
#include "coordinator/participants/participant.h"
