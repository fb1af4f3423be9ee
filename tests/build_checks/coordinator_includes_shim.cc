// Must not compile with the coordinator's include root (tests/unit/include_roots.cmake): the
// coordinator reaches a shim only through the protocol in common/.
#include "common/protocol.h"
#include "shim/tables/sharing_table.h"
