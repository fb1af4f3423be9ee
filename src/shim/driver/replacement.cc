// The replacement lookup (replacement.h), generated from entry_points.def and the generated
// gated_entry_points.def (every other driver entry point; its rows are driver rows here too,
// and its CUSNAP_API_ALIAS rows name entry points a resolver returns under another name,
// e.g. cuGraphInstantiateWithFlags for "cuGraphInstantiate"). Row data is a
// constexpr array and the pointers come from generated switches, so nothing here needs a
// dynamic initializer: a resolver may run before the shim's constructors have.
#include "shim/driver/replacement.h"

#include <cstring>

#include "shim/driver/driver_api.h"

// The exported wrappers (exports.cc), declared here to take their addresses. The runtime
// header marks cudaGetDriverEntryPoint deprecated; naming our own wrapper is not a use of it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
extern "C" {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) CUresult symbol params;
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) cudaError_t symbol params;
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) CUresult symbol params;
#include "shim/driver/gated_entry_points.def"
}

namespace cusnap::shim {
namespace {

enum Row : int {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) kRow_##symbol,
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) kRow_##symbol,
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) kRow_##symbol,
#include "shim/driver/gated_entry_points.def"
  kRowCount
};

constexpr bool kPerThread_DEFAULT = false;
constexpr bool kPerThread_PTSZ = true;

struct RowInfo {
  const char* symbol;
  const char* api_name;
  bool per_thread;
  bool runtime;
};

constexpr RowInfo kRows[kRowCount] = {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, kPerThread_##variant, false},
#define CUSNAP_RUNTIME_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, kPerThread_##variant, true},
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  {#symbol, api_name, kPerThread_##variant, false},
#include "shim/driver/gated_entry_points.def"
};

// A name a resolver answers with the entry point of another row (cuda.h's `#define cuX cuY`).
struct Alias {
  const char* api_name;
  int row;
};
constexpr Alias kAliases[] = {
#define CUSNAP_API_ALIAS(api_name, symbol) {api_name, kRow_##symbol},
#include "shim/driver/gated_entry_points.def"
};

const void* wrapper_of(int row) {
  switch (row) {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  case kRow_##symbol:                                                      \
    return reinterpret_cast<const void*>(&::symbol);
#define CUSNAP_RUNTIME_ENTRY CUSNAP_DRIVER_ENTRY
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  case kRow_##symbol:                                                     \
    return reinterpret_cast<const void*>(&::symbol);
#include "shim/driver/gated_entry_points.def"
    default:
      return nullptr;
  }
}

// The real driver pointer of a driver row (runtime rows never come back from a resolver).
const void* real_of(int row) {
  const DriverApi& real = driver();
  switch (row) {
#define CUSNAP_DRIVER_ENTRY(symbol, api_name, since, variant, params, args) \
  case kRow_##symbol:                                                      \
    return reinterpret_cast<const void*>(real.symbol);
#include "shim/driver/entry_points.def"
#define CUSNAP_GATED_ENTRY(symbol, api_name, since, variant, params, args) \
  case kRow_##symbol:                                                     \
    return reinterpret_cast<const void*>(real.symbol);
#include "shim/driver/gated_entry_points.def"
    default:
      return nullptr;
  }
}

}  // namespace

const void* wrapper_for_symbol(const char* symbol) {
  for (int row = 0; row < kRowCount; ++row) {
    if (std::strcmp(kRows[row].symbol, symbol) == 0) return wrapper_of(row);
  }
  return nullptr;
}

bool is_wrapper(const void* pointer) {
  for (int row = 0; row < kRowCount; ++row) {
    if (wrapper_of(row) == pointer) return true;
  }
  return false;
}

Replacement replacement_for(const char* api_name, const void* real, bool per_thread) {
  bool intercepted = false;
  int match = -1;
  for (int row = 0; row < kRowCount; ++row) {
    if (kRows[row].runtime || std::strcmp(kRows[row].api_name, api_name) != 0) continue;
    intercepted = true;
    if (real_of(row) != real) continue;
    if (match < 0 || kRows[row].per_thread == per_thread) match = row;
  }
  for (const Alias& alias : kAliases) {
    if (match >= 0 || std::strcmp(alias.api_name, api_name) != 0) continue;
    intercepted = true;
    if (real_of(alias.row) == real) match = alias.row;
  }
  if (match >= 0) return {Replacement::Kind::kWrapper, wrapper_of(match)};
  if (!intercepted || is_wrapper(real)) return {};
  return {Replacement::Kind::kUnknownAbi, nullptr};
}

}  // namespace cusnap::shim
#pragma GCC diagnostic pop
