// cusnap_build_info: which shim a process has loaded, for bug reports and `cusnap status`.
// The values come from CMake (src/shim/CMakeLists.txt) and from cuda.h.
#include "shim/driver/cuda_abi.h"

#ifndef CUSNAP_VERSION
#define CUSNAP_VERSION "unknown"
#endif
#ifndef CUSNAP_GIT_COMMIT
#define CUSNAP_GIT_COMMIT "unknown"
#endif
#ifndef CUSNAP_BUILD_TYPE
#define CUSNAP_BUILD_TYPE "unknown"
#endif

#define CUSNAP_STRINGIFY_(x) #x
#define CUSNAP_STRINGIFY(x) CUSNAP_STRINGIFY_(x)

/// One line naming the shim: version, git commit at build time ("-dirty" when tracked files
/// differ from it, "unknown" outside a git checkout), the CUDA_VERSION of the headers it was
/// compiled against (1000*major + 10*minor), and the build type (with "+sanitizers" for the
/// asan preset). Static storage.
extern "C" __attribute__((visibility("default"))) const char* cusnap_build_info(void) {
  return "cusnap " CUSNAP_VERSION " commit " CUSNAP_GIT_COMMIT " cuda-headers " CUSNAP_STRINGIFY(
      CUDA_VERSION) " build " CUSNAP_BUILD_TYPE;
}
