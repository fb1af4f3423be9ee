// Lease renewal (lease.h).
#include "coordinator/participants/lease.h"

#include <chrono>
#include <string>

#include "common/settings.h"

namespace cusnap::coord {

uint64_t LeaseMsFromEnvironment() {
  const char* value = settings::Value(settings::kLeaseMs);
  if (value == nullptr) return kDefaultLeaseMs;
  return settings::NumberOf(settings::kLeaseMs, value).value_or(kDefaultLeaseMs);
}

LeaseKeeper::LeaseKeeper(const std::vector<Participant*>& participants, uint64_t lease_ms)
    : lease_ms_(lease_ms) {
  for (Participant* p : participants) threads_.emplace_back([this, p] { Renew(p); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stopped_.notify_all();
  for (auto& t : threads_) t.join();
}

void LeaseKeeper::Renew(Participant* participant) {
  const auto period = std::chrono::milliseconds(lease_ms_ / 4 > 0 ? lease_ms_ / 4 : 1);
  proto::StepRequest renew{proto::Op::kRenew, 0, ""};
  renew.lease_ms = lease_ms_;
  std::unique_lock lock(mutex_);
  while (!stopped_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    // Bounded by the lease: a renewal queued behind a long step is answered after it.
    (void)participant->Call(renew.Encode(), static_cast<int>(lease_ms_));
    lock.lock();
  }
}

}  // namespace cusnap::coord
