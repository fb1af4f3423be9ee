// Range checks of durations from outside (durations.h).
#include "common/durations.h"

#include <cerrno>

#include "common/ids.h"

namespace cusnap {
namespace {

// "<what> <value> ms is outside the range 0 (<zero>) to <max> ms".
std::string OutOfRange(const char* what, uint64_t value, uint64_t max, const char* zero) {
  return std::string(what) + " " + std::to_string(value) + " ms is outside the range 0 (" + zero +
         ") to " + std::to_string(max) + " ms";
}

}  // namespace

Result<uint64_t> ParseDurationMs(const char* name, const char* text, uint64_t min, uint64_t max) {
  const std::string range = std::to_string(min) + " to " + std::to_string(max) + " ms";
  const std::string given = std::string(name) + "='" + text + "'";
  const char* p = text;
  const char* end = text;
  while (*end != '\0') ++end;
  uint64_t value = 0;
  // Only the digits are read, and no more than 19 of them: twenty may wrap 64 bits, and
  // every maximum here has far fewer.
  const char* digits_end = p;
  while (digits_end < end && *digits_end >= '0' && *digits_end <= '9') ++digits_end;
  if (digits_end == text || digits_end != end) {
    return Error{EINVAL, given + " is not a whole number of ms from " + range};
  }
  if (end - text > 19 || !ParseDecimal(p, end, &value) || value < min || value > max) {
    return Error{EINVAL, given + " is outside the range " + range};
  }
  return value;
}

std::string StepDurationsProblem(const proto::StepRequest& request) {
  if (request.lease_ms > kMaxLeaseMs) {
    return OutOfRange("lease_ms", request.lease_ms, kMaxLeaseMs, "no lease");
  }
  if (request.drain_ms > kMaxDrainMs) {
    return OutOfRange("drain_ms", request.drain_ms, kMaxDrainMs, "the shim's default");
  }
  return "";
}

}  // namespace cusnap
