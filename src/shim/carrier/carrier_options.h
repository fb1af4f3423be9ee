// How the host carrier provides, pins and keeps its memory, and what it copies: read once
// from the environment (the README's "Settings" lists the variables and their defaults).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cusnap::shim {

/// When the arena is provided (CUSNAP_CARRIER, DESIGN.md "Environment").
enum class CarrierMode { kLazy, kEager };

/// How the arena is pinned for the copies (CUSNAP_CARRIER_PIN).
enum class CarrierPinning {
  kPipelined,  ///< "pipelined": chunks registered ahead of their copies and unregistered behind
               ///< them on two threads of their own (chunk_pinner.h); nothing stays pinned
  kKept,       ///< "kept": registered once and kept registered across cycles
  kTransfer,   ///< "transfer": the used arena registered before the copies, unregistered after
};

/// Which tracked allocations travel through the carrier (CUSNAP_CARRY).
enum class CarryScope {
  kAll,     ///< "all": every VMM allocation the shim creates is tracked and carried
  kShared,  ///< "shared": only POSIX-capable allocations are tracked (private ones go
            ///< through the native checkpoint)
};

/// Everything the carrier's behaviour depends on.
struct CarrierOptions {
  CarrierMode mode = CarrierMode::kLazy;
  /// kept: measured fastest on an H200, warm save 52.8 GB/s and reallocate 54.7 GB/s against
  /// 18-22 GB/s for pipelined (a registration beside a copy slows the copy about 3x), cold
  /// too, and the whole cycle shorter although a pinned carrier slows the native cycle
  /// (docs/MEASURED.md M11, M21).
  CarrierPinning pinning = CarrierPinning::kKept;
  /// Copy, pinning and zero-scan unit, bytes (CUSNAP_CARRIER_CHUNK_MIB, default 64 MiB; a
  /// multiple of 2 MiB).
  size_t chunk_bytes = size_t{64} << 20;
  /// Device-side scan for all-zero chunks, which are not copied and are recreated with a
  /// memset (CUSNAP_ZERO_SCAN=on|off, default on).
  bool zero_scan = true;
  /// Arena bytes kept once a cycle finished (CUSNAP_CARRIER_KEEP: "all" (default), "none",
  /// or a number of MiB); the rest goes back to the kernel.
  size_t keep_bytes = SIZE_MAX;
  /// Threads that first-touch a growing arena, and that stream a dump's carrier files to and
  /// from the device (CUSNAP_CARRIER_THREADS; CarrierOptionsFromEnvironment's default: 16,
  /// at most the CPUs the process may run on).
  unsigned provision_threads = 8;
  /// Pinned host memory a dump or a restore from carrier files streams through, bytes: one
  /// buffer of kStreamBuffer (at most a file unit and this) per I/O thread, at least one
  /// (CUSNAP_CARRIER_RING_MIB, default 512 MiB). It bounds the host memory such a transfer
  /// takes beside the job's own; no arena is provided for it.
  size_t ring_bytes = size_t{512} << 20;
};

/// The options as the environment sets them (common/settings.h); a value the settings table
/// does not take gives its default (the shim logs it once, when it attaches).
CarrierOptions CarrierOptionsFromEnvironment();

/// CUSNAP_CARRIER alone: "lazy" (default) or "eager"; anything else is read as lazy.
CarrierMode CarrierModeFromEnvironment();

/// CUSNAP_CARRY: "all" (default) or "shared"; anything else is read as all.
CarryScope CarryScopeFromEnvironment();

}  // namespace cusnap::shim
