// The hangup guard (hangup_guard.h). Its state is one per process, as a signal disposition
// is; it is only changed on the endpoint's control thread (Arm, Disarm) and read by the
// handler, which uses async-signal-safe calls only.
#include "shim/lifecycle/hangup_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/log.h"

namespace cusnap::shim {
namespace {

char g_marker[PATH_MAX];               // the held marker, NUL-terminated
struct sigaction g_replaced;           // the application's disposition while armed
std::atomic<bool> g_armed{false};
std::atomic<unsigned> g_dropped{0};    // SIGHUPs dropped while armed

void OnHangup(int, siginfo_t*, void*) {
  const int saved_errno = errno;
  g_dropped.fetch_add(1);
  // Whoever sent it (the kernel for an orphaned group or a hangup, a shell for its jobs)
  // continued the process too; while cusnap holds it, it goes back to being stopped
  // (access and kill are async-signal-safe; restore renames the marker away before it
  // continues the process).
  if (::access(g_marker, F_OK) == 0) ::kill(::getpid(), SIGSTOP);
  errno = saved_errno;
}

bool IsOurs(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == &OnHangup;
}

}  // namespace

void ArmHangupGuard(const std::string& held_marker) {
  if (g_armed.load() || held_marker.size() >= sizeof g_marker) return;
  struct sigaction current {};
  if (::sigaction(SIGHUP, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 ||
      (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN)) {
    return;  // the application handles SIGHUP itself
  }
  std::memcpy(g_marker, held_marker.c_str(), held_marker.size() + 1);
  g_replaced = current;
  g_dropped.store(0);
  struct sigaction guard {};
  guard.sa_sigaction = &OnHangup;
  guard.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&guard.sa_mask);
  if (::sigaction(SIGHUP, &guard, nullptr) == 0) g_armed.store(true);
}

void DisarmHangupGuard() {
  if (!g_armed.load()) return;
  struct sigaction current {};
  if (::sigaction(SIGHUP, nullptr, &current) == 0 && IsOurs(current)) {
    ::sigaction(SIGHUP, &g_replaced, nullptr);
  }
  g_armed.store(false);
  if (const unsigned dropped = g_dropped.exchange(0); dropped > 0) {
    CUSNAP_LOG_WARN("%u SIGHUP (the job's shell exited, or its terminal hung up) reached this "
                    "process while it was checkpointed; dropped, so that the job survived",
                    dropped);
  }
}

}  // namespace cusnap::shim
