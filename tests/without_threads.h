// Runs a check in this process while no thread can be started: the address-space limit
// (RLIMIT_AS) is lowered to what the process maps now plus half a thread's default stack, so
// pthread_create cannot map a new thread's stack (EAGAIN) while the check can still map a
// few MiB, and threads that wait take every stack glibc keeps
// for reuse. The shim lives in other people's processes, where a thread limit or a full
// address space is an answer it must handle, never an abort (shim/quiet_thread.h). In this
// process, not a forked child: the (simulated, like the real) driver is unusable after fork.
// AddressSanitizer's shadow reservations fail under such a limit: callers skip under it
// (scripts/test.sh runs them on the release preset).
#pragma once

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

namespace cusnap::test {

/// What WithoutThreads returns when a thread could still be started (the check proves
/// nothing and did not run), or when the limit could not be set.
constexpr int kThreadsStillStart = 90;
constexpr int kNoLimit = 91;

/// Bytes this process maps now (VmSize in /proc/self/status), 0 when unreadable.
inline size_t MappedBytes() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib * 1024;
}

/// Runs `check()` (an int: 0 for a pass) while no thread can start, then lifts the limit and
/// ends the waiting threads. Returns check()'s value, kThreadsStillStart or kNoLimit.
template <typename Check>
int WithoutThreads(Check check) {
  int gate[2];
  if (pipe(gate) != 0) return kNoLimit;
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  std::vector<pthread_t> waiting;
  waiting.reserve(64);
  pthread_attr_t defaults;
  size_t stack_bytes = 0;
  if (pthread_getattr_default_np(&defaults) == 0) {
    pthread_attr_getstacksize(&defaults, &stack_bytes);
    pthread_attr_destroy(&defaults);
  }
  const rlimit low{MappedBytes() + stack_bytes / 2, old.rlim_max};
  int result = kNoLimit;
  if (setrlimit(RLIMIT_AS, &low) == 0) {
    const auto wait = [](void* fd) -> void* {
      char byte;
      while (read(*static_cast<int*>(fd), &byte, 1) > 0) {
      }
      return nullptr;
    };
    for (pthread_t thread; waiting.size() < 64; waiting.push_back(thread)) {
      if (pthread_create(&thread, nullptr, wait, &gate[0]) != 0) break;
    }
    result = waiting.size() < 64 ? check() : kThreadsStillStart;
    setrlimit(RLIMIT_AS, &old);
  }
  close(gate[1]);  // every waiting thread reads the end of the pipe and ends
  for (pthread_t thread : waiting) pthread_join(thread, nullptr);
  close(gate[0]);
  return result;
}

}  // namespace cusnap::test
