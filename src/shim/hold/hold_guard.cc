// The hold guard (hold_guard.h). Its state is one per process, as a signal disposition is;
// it is only changed on the endpoint's control thread (Arm, Disarm) and read by the handler,
// which uses async-signal-safe calls only.
#include "shim/hold/hold_guard.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/hold_marker.h"
#include "common/ids.h"
#include "common/log.h"

namespace cusnap::shim {
namespace {

/// One guarded signal: what the guard replaced, and how often it dropped the signal.
struct Guarded {
  int signo;
  const char* why;               // what sends it, for the log at activate
  struct sigaction replaced;     // the application's disposition while armed
  std::atomic<bool> armed{false};
  std::atomic<unsigned> dropped{0};
};

Guarded g_guarded[] = {
    {SIGHUP, "the job's shell exited, or its terminal hung up", {}, {}, {}},
    {SIGCONT, "kill -CONT, a shell's bg or fg, or a hangup", {}, {}, {}},
};
char g_marker[PATH_MAX];  // the held marker, NUL-terminated
// A thread is keeping the process stopped while the marker exists. Process-directed signals
// reach any thread: with two in the handler, one could find the marker, be stopped by the
// other's SIGSTOP before its own, and send that SIGSTOP after restore continued the process
// (the marker gone by then), stopping the restored job for good. So one thread at a time
// keeps the hold, checking the marker again each time the process is continued; a signal
// that reaches another thread meanwhile is left to it. (A SIGSTOP that still lands after a
// restore's continue is undone by the restore: coordinator/participants/hold.cc, KeepContinued.)
std::atomic<bool> g_stopping{false};

void OnSignal(int signo, siginfo_t*, void*) {
  const int saved_errno = errno;
  // Whoever sent it continued the process too (SIGCONT itself, or the SIGCONT that comes
  // with a hangup); while cusnap holds it, it goes back to being stopped (access and kill
  // are async-signal-safe; restore renames the marker away before it continues the process,
  // and that SIGCONT, cusnap's own, is neither undone nor counted). A SIGHUP is dropped
  // whether held or not. Nothing is written here: stderr may be a pipe whose reader is gone
  // (SIGPIPE).
  if (g_stopping.exchange(true)) {  // another thread keeps the hold for both
    for (Guarded& g : g_guarded) {
      if (g.signo == signo) g.dropped.fetch_add(1);
    }
    errno = saved_errno;
    return;
  }
  const bool held = ::access(g_marker, F_OK) == 0;
  for (Guarded& g : g_guarded) {
    if (g.signo == signo && (held || signo == SIGHUP)) g.dropped.fetch_add(1);
  }
  // kill returns once the process was continued: held still (a SIGCONT from anyone but
  // restore, which renames the marker first), it stops again.
  while (::access(g_marker, F_OK) == 0) ::kill(::getpid(), SIGSTOP);
  g_stopping.store(false);
  errno = saved_errno;
}

bool IsOurs(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == &OnSignal;
}

/// Replaces `g`'s disposition with the guard's when it is SIG_DFL or SIG_IGN.
void Arm(Guarded& g) {
  struct sigaction current {};
  if (::sigaction(g.signo, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 ||
      (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN)) {
    return;  // the application handles it itself
  }
  g.replaced = current;
  g.dropped.store(0);
  struct sigaction guard {};
  guard.sa_sigaction = &OnSignal;
  guard.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&guard.sa_mask);
  if (::sigaction(g.signo, &guard, nullptr) == 0) g.armed.store(true);
}

void Disarm(Guarded& g) {
  if (!g.armed.load()) return;
  struct sigaction current {};
  if (::sigaction(g.signo, nullptr, &current) == 0 && IsOurs(current)) {
    ::sigaction(g.signo, &g.replaced, nullptr);
  }
  g.armed.store(false);
  if (const unsigned dropped = g.dropped.exchange(0); dropped > 0) {
    CUSNAP_LOG_WARN("%u %s (%s) reached this process while it was checkpointed; dropped, and "
                    "the process was stopped again while held, so that the job survived",
                    dropped, sigabbrev_np(g.signo), g.why);
  }
}

}  // namespace

void ArmHoldGuard(const std::string& held_marker) {
  if (held_marker.size() >= sizeof g_marker) return;
  for (const Guarded& g : g_guarded) {
    if (g.armed.load()) return;  // armed already: the marker stays as it was
  }
  std::memcpy(g_marker, held_marker.c_str(), held_marker.size() + 1);
  for (Guarded& g : g_guarded) Arm(g);
}

void DisarmHoldGuard() {
  for (Guarded& g : g_guarded) Disarm(g);
}

Status HoldThisProcess(const std::string& held_marker, const std::string& phase) {
  const HoldMarker marker{ProcessStartTime(static_cast<int>(::getpid())), OwnPidNamespace(), phase};
  if (Status written = WriteHoldMarker(held_marker, marker); !written) return written;
  ::kill(::getpid(), SIGSTOP);  // every thread stops; this call returns once continued
  return Ok{};
}

}  // namespace cusnap::shim
