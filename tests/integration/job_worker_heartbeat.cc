// The watchdog / heartbeat monitor pair of job_worker (job_worker_heartbeat.h).
#include "job_worker_heartbeat.h"

#include <cuda.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace jobworker {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_started{false};
std::atomic<uint64_t> g_beats{0};
std::atomic<uint64_t> g_samples{0};
std::atomic<int64_t> g_last_sample_ns{0};

int64_t Now() { return Clock::now().time_since_epoch().count(); }

/// The watchdog: a driver call (which waits while the process is natively locked, as
/// PyTorch's cudaEventQuery does), then a beat.
void Watchdog() {
  for (;;) {
    CUcontext current = nullptr;
    (void)cuCtxGetCurrent(&current);
    g_beats.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The monitor: never calls the driver; a sample at least `timeout_ms` after the previous
/// one that finds no new beat ends the process.
void Monitor(int timeout_ms) {
  uint64_t seen = g_beats.load();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    if (Now() - g_last_sample_ns.load() < int64_t{timeout_ms} * 1'000'000) continue;
    g_last_sample_ns.store(Now());
    g_samples.fetch_add(1);
    const uint64_t beats = g_beats.load();
    if (beats == seen) {
      std::fprintf(stderr, "job_worker %d: heartbeat monitor: the watchdog made no progress "
                   "for %d ms; ending the process\n", static_cast<int>(::getpid()), timeout_ms);
      std::fflush(stderr);
      ::_exit(kStuckExit);
    }
    seen = beats;
  }
}

}  // namespace

std::string StartHeartbeat(int timeout_ms) {
  if (timeout_ms <= 0) return "bad heartbeat: timeout must be positive";
  if (g_started.exchange(true)) return "bad heartbeat: already started";
  g_last_sample_ns.store(Now());
  std::thread(Watchdog).detach();
  std::thread(Monitor, timeout_ms).detach();
  return "ok";
}

std::string Beats() {
  const int64_t since_ms = (Now() - g_last_sample_ns.load()) / 1'000'000;
  return "ok " + std::to_string(g_beats.load()) + " " + std::to_string(g_samples.load()) + " " +
         std::to_string(since_ms);
}

}  // namespace jobworker
