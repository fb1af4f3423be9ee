// What the host carrier's transfers share between carrier.cc (the copies through the arena)
// and carrier_stream.cc (the copies streamed from carrier files): one transfer's working
// state and how its errors name a slot and a chunk. Internal to the carrier.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "shim/carrier/carrier.h"

namespace cusnap::shim {

/// "allocation handle 0x.. (N bytes, device D)": how an error names a slot.
inline std::string SlotText(const CarrierSlot& slot) {
  char text[96];
  snprintf(text, sizeof text, "allocation handle 0x%llx (%zu bytes, device %d)",
           static_cast<unsigned long long>(slot.handle), slot.size, slot.device);
  return text;
}

/// "bytes [a, b) of ": how an error names a chunk of a slot.
inline std::string ChunkText(size_t offset, size_t bytes) {
  char text[64];
  snprintf(text, sizeof text, "bytes [%zu, %zu) of ", offset, offset + bytes);
  return text;
}

/// A driver call of the carrier that failed: the CUresult, named with the process.
inline Error CarrierDriverError(const DriverApi& api, CUresult result, const std::string& what) {
  return Error{static_cast<int>(result), ThisProcess() + ": host carrier: " + what +
                                             " failed with " + ResultText(api, result)};
}

/// "<dir>/<stem>" split into its folder ("." without one) and its file stem.
inline std::pair<std::string, std::string> SplitStemPath(const std::string& stem_path) {
  const size_t slash = stem_path.rfind('/');
  if (slash == std::string::npos) return {".", stem_path};
  return {stem_path.substr(0, slash), stem_path.substr(slash + 1)};
}

/// One context's share of a transfer: its stream and its slots.
struct CopyGroup {
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::vector<size_t> slots;
  bool synced = true;  // its stream was synchronized (or never used)
};

/// One Save's or Load's working state.
struct HostCarrier::Transfer {
  std::span<const CarrierSlot> slots;
  Direction direction = Direction::kToHost;
  CarrierTransfer result;
  std::vector<CopyGroup> groups;
  std::vector<Staging> staging;
  std::optional<Error> failure;
  void Fail(const DriverApi& api, CUresult r, const std::string& what) {
    if (!failure) failure = CarrierDriverError(api, r, what);
  }
};

}  // namespace cusnap::shim
