// Keeps libcusnap.so loadable on glibc 2.34 although it is built on glibc 2.36 (Debian 12).
//
// The shim links libstdc++ and libgcc statically (it must not drag a libstdc++ into other
// people's processes), and their archives were built against this machine's glibc:
//   - libstdc++ (std::random_device) calls arc4random, new in GLIBC_2.36;
//   - libgcc_eh's unwinder calls _dl_find_object, new in GLIBC_2.35.
// Defined here, hidden, the archive members bind to these at link time instead of importing
// the glibc symbols, and the highest version the shim needs stays GLIBC_2.34 (asserted by
// tests/unit/build_check.py). Neither is on a path the shim uses:
//   - arc4random draws from getrandom (GLIBC_2.25), retrying on EINTR, as glibc's does;
//   - _dl_find_object reports "no object" (-1), which makes the unwinder fall back to
//     dl_iterate_phdr. The shim is built -fno-exceptions, so no exception is ever thrown
//     through it; an unwind that reached it would terminate either way.
#include <dlfcn.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" {

__attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t value = 0;
  for (;;) {
    ssize_t got = getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) abort();  // no entropy source at all: glibc aborts too
  }
}

__attribute__((visibility("hidden"))) int _dl_find_object(void*, struct dl_find_object*) noexcept {
  return -1;
}

}  // extern "C"
