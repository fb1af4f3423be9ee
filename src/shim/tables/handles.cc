#include "shim/tables/handles.h"

namespace cusnap::shim {

uint64_t LogicalHandleCounter::Next() {
  if (next_ > kLogicalCounterMask) return 0;
  return kLogicalTag | next_++;
}

}  // namespace cusnap::shim
