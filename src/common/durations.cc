// Range checks of durations from outside (durations.h).
#include "common/durations.h"

namespace cusnap {
namespace {

// "<what> <value> ms is outside the range 0 (<zero>) to <max> ms".
std::string OutOfRange(const char* what, uint64_t value, uint64_t max, const char* zero) {
  return std::string(what) + " " + std::to_string(value) + " ms is outside the range 0 (" + zero +
         ") to " + std::to_string(max) + " ms";
}

}  // namespace

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
