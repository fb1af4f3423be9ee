// Range-checked numbers from a parsed state file, which is not trusted: nlohmann::json's
// get<T>() casts without a check (pid 2^40 read as 0, -1 read as a size of 2^64 - 1); these
// refuse instead.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace cusnap::coord {

/// The largest pid Linux hands out (PID_MAX_LIMIT, 2^22).
inline constexpr int kMaxPid = 4'194'304;
/// More device ordinals than any machine has: a bound, not a limit of CUDA.
inline constexpr int kMaxDevices = 4096;

/// Field `field` of `json` as the integer type T, within [lo, hi]. Throws
/// std::invalid_argument naming the field when it is not an integer (a float, a string, a
/// boolean) or lies outside the range, nlohmann::json's out_of_range when it is missing.
template <typename T>
T IntegerField(const nlohmann::json& json, const char* field,
               T lo = std::numeric_limits<T>::min(), T hi = std::numeric_limits<T>::max()) {
  const nlohmann::json& value = json.at(field);
  if (!value.is_number_integer()) {  // unsigned counts as integer too; floats do not
    throw std::invalid_argument(std::string("field '") + field + "' is not an integer");
  }
  bool fits = false;
  T result{};
  if (value.is_number_unsigned() || value.get<int64_t>() >= 0) {
    const uint64_t u = value.get<uint64_t>();
    uint64_t lo_u = 0;
    bool hi_negative = false;
    if constexpr (std::is_signed_v<T>) {
      lo_u = lo < 0 ? 0 : static_cast<uint64_t>(lo);
      hi_negative = hi < 0;
    } else {
      lo_u = lo;
    }
    fits = !hi_negative && u >= lo_u && u <= static_cast<uint64_t>(hi);
    result = static_cast<T>(u);
  } else if constexpr (std::is_signed_v<T>) {
    const int64_t i = value.get<int64_t>();
    fits = i >= static_cast<int64_t>(lo) && i <= static_cast<int64_t>(hi);
    result = static_cast<T>(i);
  }
  if (!fits) {
    throw std::invalid_argument(std::string("field '") + field + "' is " + value.dump() +
                                ", outside " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return result;
}

}  // namespace cusnap::coord
