// The exported ABI of libcusnap.so: one extern "C" wrapper per row of entry_points.def,
// each only forwarding to its hook. Nothing else is defined here.
#include "shim/hooks/hooks.h"

#define CUSNAP_EXPORT extern "C" __attribute__((visibility("default")))
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  CUSNAP_EXPORT CUresult symbol params { return cusnap::shim::hook::symbol args; }
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) \
  CUSNAP_EXPORT cudaError_t symbol params { return cusnap::shim::hook::symbol args; }
#include "shim/driver/entry_points.def"
