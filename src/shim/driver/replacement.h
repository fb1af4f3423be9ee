// The replacement lookup every resolver path uses (the cuGetProcAddress and
// cudaGetDriverEntryPoint hooks in resolvers.cc, the dlsym interposer in dlsym.cc), generated
// from entry_points.def: one row there is one wrapper here.
#pragma once

namespace cusnap::shim {

/// The shim's wrapper exported under `symbol` (a row's ELF name, e.g.
/// "cuMulticastBindMem_v2"), or nullptr when `symbol` is not in the interception table.
const void* wrapper_for_symbol(const char* symbol);

/// True when `pointer` is one of the shim's wrappers (a nested resolution: the runtime's
/// resolver asked the driver's, which the shim already answered).
bool is_wrapper(const void* pointer);

/// What a resolver hands the program for `api_name` after the real resolver succeeded with
/// `real` (a driver entry point).
struct Replacement {
  enum class Kind {
    kKeep,        ///< not intercepted, or already a wrapper: hand back `real` unchanged
    kWrapper,     ///< intercepted: hand back `wrapper`
    kUnknownAbi,  ///< intercepted name, but `real` is no ABI the table knows: fail closed
  };
  Kind kind = Kind::kKeep;
  const void* wrapper = nullptr;
};

/// Picks the wrapper whose ABI is the one the driver returned: `real` is compared with the
/// real pointers of the driver rows that share `api_name` (e.g. cuMulticastBindMem asked at
/// 13010 on a 13.1 driver returns the real cuMulticastBindMem_v2, so its wrapper). When two
/// rows share that pointer, the one whose variant matches `per_thread` wins. An intercepted
/// name whose pointer matches no row gives kUnknownAbi (SPEC-REFERENCE C.5 (2)): handing out
/// the untracked real function would let the program bypass the shim.
Replacement replacement_for(const char* api_name, const void* real, bool per_thread);

}  // namespace cusnap::shim
