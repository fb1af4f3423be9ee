// The carrier's options from the environment (carrier_options.h), read through the settings
// table (common/settings.h). A value the table does not take gives the default: the shim
// logged it when it attached (process.cc), and reports it to `cusnap status`.
#include "shim/carrier/carrier_options.h"

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

CarrierOptions CarrierOptionsFromEnvironment() {
  CarrierOptions options;
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
