// GoogleTest printers for the shim's enums (see printers.h).
#pragma once

#include <ostream>

#include "printers.h"
#include "shim/carrier/carrier.h"
#include "shim/tables/mapping_index.h"

namespace cusnap::shim {
inline void PrintTo(CarrierMode v, std::ostream* os) { printers::PrintEnum(v, os); }
inline void PrintTo(RangeMatch v, std::ostream* os) { printers::PrintEnum(v, os); }
}  // namespace cusnap::shim
