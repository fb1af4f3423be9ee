// Threads the shim starts inside the application: every signal is blocked on them, so none of
// the application's handlers ever runs there, and a thread that cannot be started is an
// answer (the caller does the work itself or fails), never an abort in someone else's process.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <cstddef>

namespace cusnap::shim {

/// Starts `main(arg)` on a new joinable thread with every signal blocked; `stack_bytes` 0
/// means the default stack. Returns false when pthread_create failed (EAGAIN under a thread
/// limit, ENOMEM): no thread was started.
inline bool StartQuietThread(pthread_t* id, void* (*main)(void*), void* arg, size_t stack_bytes = 0) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack_bytes != 0) pthread_attr_setstacksize(&attr, stack_bytes);
  const int rc = pthread_create(id, &attr, main, arg);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return rc == 0;
}

}  // namespace cusnap::shim
