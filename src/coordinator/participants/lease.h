// The lease a command holds on its participants (DESIGN.md, "Transactions"): every
// lifecycle request carries it (StepRequest::lease_ms), and while the command runs a
// LeaseKeeper renews it with kRenew. A command that dies (SIGKILL) stops renewing: each
// shim that is QUIESCED or SAVED before the command's point of no return rolls back by
// itself once the lease runs out, so the job is never held by a command that is gone.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/participants/participant.h"

namespace cusnap::coord {

/// The lease when the environment gives none (CUSNAP_LEASE_MS), in ms.
inline constexpr uint64_t kDefaultLeaseMs = 10'000;

/// CUSNAP_LEASE_MS when it is a value the settings table takes (common/settings.h: a whole
/// number of ms from 1 to kMaxLeaseMs), else kDefaultLeaseMs (the CLI refuses such a value
/// before a command starts).
uint64_t LeaseMsFromEnvironment();

/// Renews the lease of every participant given, every lease_ms / 4, from one thread per
/// participant (a shim busy with a long step answers its renewal late; the others must not
/// wait for it). Errors are ignored: a participant that does not answer is named by the
/// command's next step. Stops (and joins) when destroyed.
class LeaseKeeper {
 public:
  /// The participants must outlive the keeper.
  LeaseKeeper(const std::vector<Participant*>& participants, uint64_t lease_ms);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

 private:
  void Renew(Participant* participant);

  uint64_t lease_ms_;
  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cusnap::coord
