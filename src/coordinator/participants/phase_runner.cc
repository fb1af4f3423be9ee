// Concurrent phases with a join barrier (phase_runner.h).
#include "coordinator/participants/phase_runner.h"

#include <cerrno>
#include <chrono>
#include <optional>
#include <system_error>
#include <thread>

namespace cusnap::coord {
namespace {

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

Result<uint64_t> Guarded(const std::function<Result<uint64_t>()>& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    return Error{-1, std::string("internal error: ") + e.what()};
  }
}

}  // namespace

PhaseReport RunPhase(const std::string& name, size_t count, const PhaseWork& work) {
  PhaseReport report;
  report.name = name;
  report.participants = count;
  std::vector<std::optional<Result<uint64_t>>> results(count);
  const auto start = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    threads.reserve(count);
    try {
      for (size_t i = 0; i < count; ++i) {
        threads.emplace_back([&, i] { results[i].emplace(Guarded([&] { return work(i); })); });
      }
    } catch (const std::system_error&) {
      // Threads that could not start leave their result empty: reported below.
    }
  }  // jthreads join here: the barrier
  report.elapsed_ms = MsSince(start);
  for (auto& r : results) {
    if (!r) {
      report.errors.push_back(name + ": could not start a thread for a participant");
      report.error_codes.push_back(EAGAIN);
    } else if (r->ok()) {
      report.bytes += r->value();
    } else {
      report.errors.push_back(r->error().message);
      report.error_codes.push_back(r->error().code);
    }
  }
  return report;
}

PhaseReport RunLocalPhase(const std::string& name, size_t participants,
                          const std::function<Result<uint64_t>()>& work) {
  PhaseReport report;
  report.name = name;
  report.participants = participants;
  const auto start = std::chrono::steady_clock::now();
  auto result = Guarded(work);
  report.elapsed_ms = MsSince(start);
  if (result.ok()) {
    report.bytes = result.value();
  } else {
    report.errors.push_back(result.error().message);
    report.error_codes.push_back(result.error().code);
  }
  return report;
}

}  // namespace cusnap::coord
