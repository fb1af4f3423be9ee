// The exported wrappers of every driver entry point the shim does not track
// (gated_entry_points.def, generated from the CUDA headers by
// driver/gen_gated_entry_points.py): each passes the process's quiesce gate, so that while a
// checkpoint or restore holds the job no driver call of the application runs (DESIGN.md,
// "Transactions": the whole application is held), then forwards to the real entry point and
// returns exactly what the driver returns. A row whose real entry point the driver lacks
// answers CUDA_ERROR_NOT_FOUND, as a resolver answers a name it does not know.
#include "shim/driver/driver_api.h"
#include "shim/process.h"

#define CUSNAP_EXPORT extern "C" __attribute__((visibility("default")))
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  CUSNAP_EXPORT CUresult symbol params {                                  \
    CUSNAP_QUIESCE_GATE();                                                \
    const auto real = ::cusnap::shim::driver().symbol;                    \
    return real != nullptr ? real args : CUDA_ERROR_NOT_FOUND;            \
  }
#include "shim/driver/gated_entry_points.def"
