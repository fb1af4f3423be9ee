// GoogleTest printers for the coordinator's enums (see printers.h).
#pragma once

#include <ostream>

#include "coordinator/coordinator.h"
#include "coordinator/native/native_driver.h"
#include "printers.h"

namespace cusnap::coord {
inline void PrintTo(Outcome v, std::ostream* os) { printers::PrintEnum(v, os); }
inline void PrintTo(DriverChoice v, std::ostream* os) { printers::PrintEnum(v, os); }
}  // namespace cusnap::coord
