// The fault matrix's pause knob (test_pause.h).
#include "cli/test_pause.h"

#include <signal.h>

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
