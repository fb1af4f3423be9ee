// The simulated driver as a DriverApi (src/shim/driver/driver_api.h) for tests that run shim code
// in the test process itself: libcuda.so.1 from CUSNAP_TEST_SIMCUDA_DIR, every row of the
// interception table and of the generated gated_entry_points.def looked up by its exported name. Test binaries
// that link shim sources get cusnap::shim::driver() from here.
#pragma once

#include "shim/driver/driver_api.h"

namespace cusnap::test {

/// The simulated driver's entry points (loaded once; aborts the test program with a
/// message when the library or an entry point is missing). cuInit(0) has been called.
const shim::DriverApi& SimDriver();

/// A dlsym of the simulated driver for entry points outside DriverApi (nullptr if absent).
void* SimSymbol(const char* name);

}  // namespace cusnap::test
