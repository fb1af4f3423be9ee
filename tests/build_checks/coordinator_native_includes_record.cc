// Must not compile with the include root of the coordinator's native room
// (tests/unit/include_roots.cmake): the record room sits above it (DESIGN.md, "Layout").
#include "coordinator/native/native_driver.h"
#include "coordinator/record/records.h"
