// The core behind every exported wrapper: one function per row of entry_points.def, in
// namespace cusnap::shim::hook, with the row's exact parameters. exports.cc forwards the
// exported ABI here and nothing else (like mimalloc's override layer); the hooks live in
// the file that owns their subject: vmm.cc (unicast VMM), multicast.cc, resolvers.cc.
#pragma once

#include "shim/driver/cuda_abi.h"

namespace cusnap::shim::hook {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) CUresult symbol params;
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) cudaError_t symbol params;
#include "shim/driver/entry_points.def"
}  // namespace cusnap::shim::hook
