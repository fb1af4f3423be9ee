#include "shim/tables/handles.h"

namespace cusnap::shim {

uint64_t LogicalHandleCounter::Next() {
  if (next_ > last_) return 0;
  return kLogicalTag | bits_ | next_++;
}

}  // namespace cusnap::shim
