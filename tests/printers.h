// GoogleTest printers for the cusnap enums that tests compare, so that a failed check names
// the values: "proto::ShimState::kFailed (11)" instead of "4-byte object <0B-00 00-00>".
// Test-only (the shim must not gain iostreams); a test file that compares one of these
// enums includes it. This file prints the enums of src/common; shim_printers.h and
// coordinator_printers.h add their layer's (one header per layer, as the layers' own
// headers cannot share a file: the shim compiles cuda.h in its internal-API mode).
//
// GoogleTest finds PrintTo by argument-dependent lookup, so each enum gets a one-line
// PrintTo in its own namespace. The enumerator's name comes from the compiler, as the
// spelling of a template argument in __PRETTY_FUNCTION__ (GCC and Clang), so no list of
// names is kept here to drift from the enums.
#pragma once

#include <array>
#include <cstddef>
#include <ostream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/log.h"
#include "common/protocol.h"
#include "common/ticket.h"

namespace cusnap::printers {

/// The spelling of the first template argument in `pretty` (a __PRETTY_FUNCTION__ of the
/// form "... [with T = <argument>; ...]" (GCC) or "... [T = <argument>]" (Clang)), without
/// a leading "cusnap::".
constexpr std::string_view TemplateArgument(std::string_view pretty) {
  size_t start = pretty.find(" = ") + 3;
  if (pretty.substr(start).starts_with("cusnap::")) start += 8;
  return pretty.substr(start, pretty.find_first_of(";]", start) - start);
}

/// "proto::ShimState" for E = cusnap::proto::ShimState.
template <typename E>
constexpr std::string_view TypeName() {
  return TemplateArgument(__PRETTY_FUNCTION__);
}

/// "proto::ShimState::kFailed" for an enumerator; "(cusnap::proto::ShimState)12" (starts with '(')
/// for a value no enumerator has.
template <auto V>
constexpr std::string_view ValueName() {
  return TemplateArgument(__PRETTY_FUNCTION__);
}

/// ValueName of each value 0 .. sizeof...(I)-1 of E, indexed by value.
template <typename E, size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> ValueNames(std::index_sequence<I...>) {
  return {ValueName<static_cast<E>(I)>()...};
}

/// Prints "proto::ShimState::kFailed (11)", or "proto::ShimState(12)" for a value without an
/// enumerator. Names are looked up for the values 0 .. kMax-1 (a compile-time table).
template <typename E, size_t kMax = 32>
void PrintEnum(E value, std::ostream* os) {
  static constexpr auto kNames = ValueNames<E>(std::make_index_sequence<kMax>());
  const auto number = static_cast<long long>(static_cast<std::underlying_type_t<E>>(value));
  if (number >= 0 && number < static_cast<long long>(kMax) &&
      !kNames[static_cast<size_t>(number)].starts_with("(")) {
    *os << kNames[static_cast<size_t>(number)] << " (" << number << ")";
  } else {
    *os << TypeName<E>() << "(" << number << ")";
  }
}

}  // namespace cusnap::printers

namespace cusnap {
inline void PrintTo(LogLevel v, std::ostream* os) { printers::PrintEnum(v, os); }
inline void PrintTo(TicketKind v, std::ostream* os) { printers::PrintEnum(v, os); }
}  // namespace cusnap

namespace cusnap::proto {
inline void PrintTo(Op v, std::ostream* os) { printers::PrintEnum(v, os); }
inline void PrintTo(ShimState v, std::ostream* os) { printers::PrintEnum(v, os); }
inline void PrintTo(RecordKind v, std::ostream* os) { printers::PrintEnum(v, os); }
}  // namespace cusnap::proto
