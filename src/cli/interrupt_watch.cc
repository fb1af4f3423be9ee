// Taking SIGINT and SIGTERM on a thread of our own (interrupt_watch.h).
#include "cli/interrupt_watch.h"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

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
  // Blocked before the thread starts: threads inherit the mask, so only sigtimedwait below
  // ever takes these signals.
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this] { Watch(); });
}

InterruptWatch::~InterruptWatch() {
  done_.store(true);
  thread_.join();
  // The command has ended and said how: a signal that came after the thread's last wait
  // must not kill the process now with its default action (the exit status would lie), so
  // it is discarded (ignoring a signal drops it while pending) before the mask is restored.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, nullptr);
  sigaction(SIGTERM, &ignore, nullptr);
  const sigset_t set = InterruptSignals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void InterruptWatch::Watch() {
  const sigset_t set = InterruptSignals();
  // Polled, so that the destructor's join never waits for a signal that does not come.
  const timespec poll{0, 100'000'000};
  while (!done_.load()) {
    const int signo = sigtimedwait(&set, nullptr, &poll);
    if (signo > 0) Tell(signo);
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
