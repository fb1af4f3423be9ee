// The fault matrix's pause knob (test_pause.h).
#include "cli/test_pause.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace cusnap::cli {

TestPauseObserver::TestPauseObserver(std::string command, const std::string& patterns,
                                     coord::PhaseObserver& inner)
    : command_(std::move(command)), inner_(inner) {
  std::stringstream in(patterns);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) patterns_.push_back(item);
  }
}

void TestPauseObserver::PhaseStarted(const std::string& name, size_t participants) {
  inner_.PhaseStarted(name, participants);
  MaybePause(name, "before");
}

void TestPauseObserver::PhaseFinished(const coord::PhaseReport& report) {
  inner_.PhaseFinished(report);
  MaybePause(report.name, "after");
}

void TestPauseObserver::BytesMoved(const std::string& name, uint64_t done, uint64_t total) {
  inner_.BytesMoved(name, done, total);
}

void TestPauseObserver::MaybePause(const std::string& phase, const char* when) {
  const std::string here = command_ + ":" + phase + ":" + when;
  for (const std::string& pattern : patterns_) {
    std::stringstream in(pattern);
    std::string parts[3];
    for (auto& part : parts) std::getline(in, part, ':');
    const bool match = parts[0] == command_ && (parts[1] == "*" || parts[1] == phase) &&
                       (parts[2] == "*" || parts[2] == when);
    if (!match) continue;
    // stdout first: a harness reading the phase lines sees the finished phase's line before
    // the pause line on stderr.
    std::fflush(stdout);
    std::fprintf(stderr, "cusnap-test-pause: %s\n", here.c_str());
    std::fflush(stderr);
    ::raise(SIGSTOP);
    // A SIGINT or SIGTERM the harness sent while this process was stopped is pending now:
    // the signal-watching thread (interrupt_watch.h) takes it within its poll. Waiting for
    // that here makes the pause mean "the signal came at this boundary" (found by a fresh
    // user: the next phases, done in microseconds, raced the watcher past the commit).
    bool was_pending = false;
    for (int i = 0; i < 400; ++i) {
      sigset_t pending;
      if (::sigpending(&pending) != 0 ||
          (!::sigismember(&pending, SIGINT) && !::sigismember(&pending, SIGTERM))) {
        break;
      }
      was_pending = true;
      ::usleep(500);
    }
    if (was_pending) ::usleep(5'000);  // the watcher, having taken it, tells the sequence
    return;
  }
}

coord::PhaseObserver& WithTestPause(const char* command, coord::PhaseObserver& inner,
                                    std::unique_ptr<coord::PhaseObserver>& holder) {
  const char* patterns = std::getenv("CUSNAP_TEST_PAUSE_AT");
  if (patterns == nullptr || *patterns == '\0') return inner;
  holder = std::make_unique<TestPauseObserver>(command, patterns, inner);
  return *holder;
}

}  // namespace cusnap::cli
