// The process gate (gate.h).
#include "gate.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace simcuda::gate {
namespace {

struct Gate {
  std::mutex mutex;
  std::condition_variable changed;
  int in_flight = 0;
  bool closed = false;
};

Gate &the_gate() {
  static Gate *g = new Gate;  // never destroyed: blocked threads may outlive static destructors
  return *g;
}

thread_local int call_depth = 0;

}  // namespace

void enter() {
  if (call_depth++ > 0) return;
  Gate &g = the_gate();
  std::unique_lock lock(g.mutex);
  g.changed.wait(lock, [&] { return !g.closed; });
  ++g.in_flight;
}

void leave() {
  if (--call_depth > 0) return;
  Gate &g = the_gate();
  std::lock_guard lock(g.mutex);
  if (--g.in_flight == 0) g.changed.notify_all();
}

CUresult lock(unsigned timeout_ms) {
  Gate &g = the_gate();
  std::unique_lock lock(g.mutex);
  g.closed = true;
  auto drained = [&] { return g.in_flight == 0; };
  if (timeout_ms == 0) {
    g.changed.wait(lock, drained);
  } else if (!g.changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), drained)) {
    g.closed = false;
    g.changed.notify_all();
    return CUDA_ERROR_TIMEOUT;
  }
  return CUDA_SUCCESS;
}

void unlock() {
  Gate &g = the_gate();
  std::lock_guard lock(g.mutex);
  g.closed = false;
  g.changed.notify_all();
}

int in_flight() {
  Gate &g = the_gate();
  std::lock_guard lock(g.mutex);
  return g.in_flight;
}

}  // namespace simcuda::gate
