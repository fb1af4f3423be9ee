// The carrier's options from the environment (carrier_options.h), read through the settings
// table (common/settings.h). A value the table does not take gives the default: the shim
// logged it when it attached (process.cc), and reports it to `cusnap status`.
#include "shim/carrier/carrier_options.h"

#include <sched.h>

#include <algorithm>

#include "common/settings.h"

namespace cusnap::shim {
namespace {

// The place of `setting`'s value among its words, or `fallback` when unset or not taken.
size_t WordOr(const settings::Setting& setting, size_t fallback) {
  const char* value = settings::Value(setting);
  return value == nullptr ? fallback : settings::WordIndex(setting, value).value_or(fallback);
}

// `setting`'s value as a number, or nullopt when unset, not taken, or one of its words.
std::optional<uint64_t> NumberSet(const settings::Setting& setting) {
  const char* value = settings::Value(setting);
  return value == nullptr ? std::nullopt : settings::NumberOf(setting, value);
}

}  // namespace

// Each table's values are in its enum's order (lazy, eager; all, shared; kept, pipelined,
// transfer; on, off; all, none).
CarrierMode CarrierModeFromEnvironment() {
  return WordOr(settings::kCarrier, 0) == 1 ? CarrierMode::kEager : CarrierMode::kLazy;
}

CarryScope CarryScopeFromEnvironment() {
  return WordOr(settings::kCarry, 0) == 1 ? CarryScope::kShared : CarryScope::kAll;
}

namespace {

// CUSNAP_CARRIER_THREADS' default: 16, at most the CPUs this process may run on (a container's
// share). 16 threads streamed 30 GB/s to and from /dev/shm where 8 moved 21-24 GB/s
// (bench/gpu_file_mapping_vs_buffer.cc).
unsigned DefaultThreads() {
  constexpr unsigned kMost = 16;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return kMost;
  return std::clamp<unsigned>(static_cast<unsigned>(CPU_COUNT(&allowed)), 1, kMost);
}

}  // namespace

CarrierOptions CarrierOptionsFromEnvironment() {
  CarrierOptions options;
  options.provision_threads = DefaultThreads();
  options.mode = CarrierModeFromEnvironment();
  constexpr CarrierPinning kPinnings[] = {CarrierPinning::kKept, CarrierPinning::kPipelined,
                                          CarrierPinning::kTransfer};
  options.pinning = kPinnings[WordOr(settings::kCarrierPin, 0)];
  if (const auto mib = NumberSet(settings::kCarrierChunkMib)) options.chunk_bytes = *mib << 20;
  options.zero_scan = WordOr(settings::kZeroScan, 0) == 0;
  if (const auto mib = NumberSet(settings::kCarrierKeep)) {
    options.keep_bytes = *mib << 20;
  } else if (WordOr(settings::kCarrierKeep, 0) == 1) {
    options.keep_bytes = 0;
  }
  if (const auto mib = NumberSet(settings::kCarrierRingMib)) options.ring_bytes = *mib << 20;
  if (const auto count = NumberSet(settings::kCarrierThreads)) {
    options.provision_threads = static_cast<unsigned>(*count);
  }
  return options;
}

}  // namespace cusnap::shim
