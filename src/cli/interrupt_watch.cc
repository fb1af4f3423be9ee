// Taking SIGINT and SIGTERM on a thread of our own (interrupt_watch.h).
#include "cli/interrupt_watch.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

namespace cusnap::cli {
namespace {

sigset_t InterruptSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

std::string SignalName(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "signal " + std::to_string(signo);
  }
}

InterruptWatch::InterruptWatch(const char* command, coord::Interrupt& interrupt)
    : command_(command), interrupt_(interrupt) {
  const sigset_t set = InterruptSignals();
  // Blocked before the thread starts: threads inherit the mask, so only the watch's signalfd
  // ever takes these signals. Without the descriptors (out of descriptors or memory) nothing
  // is blocked: the signals end the command by their default action.
  signals_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  wake_ = ::eventfd(0, EFD_CLOEXEC);
  if (signals_ < 0 || wake_ < 0) return;
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { Watch(); });
}

InterruptWatch::~InterruptWatch() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    while (::write(wake_, &one, sizeof one) < 0 && errno == EINTR) {
    }
    thread_.join();
    // The command has ended and said how: a signal that came after the thread's last read
    // must not kill the process now with its default action (the exit status would lie), so
    // it is discarded (ignoring a signal drops it while pending) before the mask is restored.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ignore, nullptr);
    sigaction(SIGTERM, &ignore, nullptr);
    const sigset_t set = InterruptSignals();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
  if (signals_ >= 0) ::close(signals_);
  if (wake_ >= 0) ::close(wake_);
}

void InterruptWatch::Watch() {
  // Woken by a signal or by the destructor, never by a timer: a command ends as soon as it
  // is done.
  pollfd fds[2] = {{signals_, POLLIN, 0}, {wake_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      if (::read(signals_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        Tell(static_cast<int>(info.ssi_signo));
      }
    }
    if (fds[1].revents != 0) return;
  }
}

void InterruptWatch::Tell(int signo) {
  int none = 0;
  first_.compare_exchange_strong(none, signo);
  const std::string name = SignalName(signo);
  const char* command = command_.c_str();
  switch (interrupt_.Request()) {
    case coord::Interrupt::Answer::kWillStop:
      std::fprintf(stderr,
                   "cusnap %s: interrupted (%s): nothing was changed for good yet; stopping at "
                   "the next phase boundary and %s\n",
                   command, name.c_str(),
                   command_ == "checkpoint" || command_ == "dump"
                       ? "resuming every participant"
                       : "leaving the job checkpointed");
      break;
    case coord::Interrupt::Answer::kWillFinish:
      std::fprintf(stderr,
                   "cusnap %s: interrupted (%s) after the job was changed: finishing the %s so "
                   "that the job is left whole; a second %s is ignored until it ends\n",
                   command, name.c_str(), command, name.c_str());
      break;
    case coord::Interrupt::Answer::kAgain:
      std::fprintf(stderr, "cusnap %s: %s ignored: the command is %s\n", command, name.c_str(),
                   first_.load() != 0 && interrupt_.StopAsked() ? "stopping" : "finishing");
      break;
  }
}

}  // namespace cusnap::cli
