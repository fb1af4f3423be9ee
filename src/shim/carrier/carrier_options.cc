// The carrier's options from the environment (carrier_options.h).
#include "shim/carrier/carrier_options.h"

#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace cusnap::shim {
namespace {

// A positive whole number of at most `max`, or 0 when `text` is not one.
size_t Number(const char* text, size_t max) {
  char* end = nullptr;
  const unsigned long long value = strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0 || value > max) return 0;
  return static_cast<size_t>(value);
}

// The value of `name`; nullptr when unset or empty.
const char* Setting(const char* name) {
  const char* value = getenv(name);
  return value == nullptr || *value == '\0' ? nullptr : value;
}

// Error level: a mistyped setting must be seen at the default log level.
void Unreadable(const char* name, const char* value, const char* used) {
  CUSNAP_LOG_ERROR("%s=%s cannot be read; using %s", name, value, used);
}

}  // namespace

CarrierMode CarrierModeFromEnvironment() {
  const char* value = Setting("CUSNAP_CARRIER");
  if (value == nullptr || strcmp(value, "lazy") == 0) return CarrierMode::kLazy;
  if (strcmp(value, "eager") == 0) return CarrierMode::kEager;
  Unreadable("CUSNAP_CARRIER", value, "lazy (it is 'lazy' or 'eager')");
  return CarrierMode::kLazy;
}

CarryScope CarryScopeFromEnvironment() {
  const char* value = Setting("CUSNAP_CARRY");
  if (value == nullptr || strcmp(value, "all") == 0) return CarryScope::kAll;
  if (strcmp(value, "shared") == 0) return CarryScope::kShared;
  Unreadable("CUSNAP_CARRY", value, "all (it is 'all' or 'shared')");
  return CarryScope::kAll;
}

CarrierOptions CarrierOptionsFromEnvironment() {
  CarrierOptions options;
  options.mode = CarrierModeFromEnvironment();
  if (const char* pin = Setting("CUSNAP_CARRIER_PIN")) {
    if (strcmp(pin, "pipelined") == 0) {
      options.pinning = CarrierPinning::kPipelined;
    } else if (strcmp(pin, "kept") == 0) {
      options.pinning = CarrierPinning::kKept;
    } else if (strcmp(pin, "transfer") == 0) {
      options.pinning = CarrierPinning::kTransfer;
    } else {
      Unreadable("CUSNAP_CARRIER_PIN", pin, "kept (it is 'kept', 'pipelined' or 'transfer')");
    }
  }
  if (const char* chunk = Setting("CUSNAP_CARRIER_CHUNK_MIB")) {
    const size_t mib = Number(chunk, 1 << 16);
    if (mib == 0 || mib % 2 != 0) {
      Unreadable("CUSNAP_CARRIER_CHUNK_MIB", chunk, "64 (an even number of MiB)");
    } else {
      options.chunk_bytes = mib << 20;
    }
  }
  if (const char* scan = Setting("CUSNAP_ZERO_SCAN")) {
    if (strcmp(scan, "off") == 0) {
      options.zero_scan = false;
    } else if (strcmp(scan, "on") != 0) {
      Unreadable("CUSNAP_ZERO_SCAN", scan, "on (it is 'on' or 'off')");
    }
  }
  if (const char* keep = Setting("CUSNAP_CARRIER_KEEP")) {
    if (strcmp(keep, "none") == 0) {
      options.keep_bytes = 0;
    } else if (strcmp(keep, "all") != 0) {
      const size_t mib = Number(keep, size_t{1} << 30);
      if (mib == 0) {
        Unreadable("CUSNAP_CARRIER_KEEP", keep, "all (it is 'all', 'none' or a number of MiB)");
      } else {
        options.keep_bytes = mib << 20;
      }
    }
  }
  if (const char* threads = Setting("CUSNAP_CARRIER_THREADS")) {
    const size_t count = Number(threads, 64);
    if (count == 0) {
      Unreadable("CUSNAP_CARRIER_THREADS", threads, "8 (1 to 64)");
    } else {
      options.provision_threads = static_cast<unsigned>(count);
    }
  }
  return options;
}

}  // namespace cusnap::shim
