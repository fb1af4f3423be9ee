// What a process's endpoint serves (endpoint.h, control.h), handed to it by the process root
// that owns both (process.cc): the endpoint sits below the root and never reaches up for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/messages.h"
#include "shim/tables/export_cache.h"
#include "shim/tables/malloc_table.h"
#include "shim/tables/multicast_table.h"
#include "shim/tables/sharing_table.h"

namespace cusnap::shim {

/// The process an endpoint answers for. Called from the endpoint's threads; the process
/// root outlives them (it is never destroyed).
class ServedProcess {
 public:
  /// The tables kIdentify and kInspect report.
  virtual SharingTable& sharing_table() = 0;
  virtual MulticastTable& multicast_table() = 0;
  virtual MallocTable& malloc_table() = 0;
  /// The export cache kExport hands descriptors from, and records importers in.
  virtual ExportCache& export_cache() = 0;
  /// The lifecycle's state now, why it failed ("" otherwise) and the checkpoint whose bytes
  /// it holds ("" when none). Reading them never builds the lifecycle, so kIdentify does not
  /// load libcuda into a process without CUDA: ACTIVE, "" and "" until the first step.
  virtual proto::ShimState LifecycleState() const = 0;
  virtual std::string LifecycleFailure() const = 0;
  virtual std::string LifecycleCheckpointId() const = 0;
  /// The settings this process's shim read whose values it did not take, one "NAME='value'
  /// is not ...; using the default, D" line each ("" when none: common/settings.h).
  virtual std::string SettingsProblems() const = 0;
  /// The bytes the carrier's arena still has to grow by to hold `bytes`
  /// (HostCarrier::GrowthFor); builds the carrier, resolving the driver.
  virtual uint64_t CarrierGrowthFor(size_t bytes) = 0;
  /// The host memory the carrier's arena holds now, bytes; 0 when no carrier was built (never
  /// builds one).
  virtual uint64_t CarrierHeldBytes() const = 0;
  /// Runs one lifecycle step (Lifecycle::Handle) past the quiesce gate: lifecycle work may go
  /// through the shim's own hooks while the gate is closed. Builds the lifecycle at the first.
  virtual Result<proto::StepReply> RunStep(const proto::StepRequest& request) = 0;

 protected:
  ~ServedProcess() = default;
};

}  // namespace cusnap::shim
