// Build information of the CLI and of a shim library file (version.h). The CLI is compiled
// with the definitions of the shim's build_info.cc (src/cli/CMakeLists.txt), so both describe
// one build the same way.
#include "cli/version.h"

#include <cuda.h>

#include <fstream>
#include <iterator>
#include <string_view>

#include "cli/commands.h"

// CUSNAP_VERSION, CUSNAP_GIT_COMMIT and CUSNAP_BUILD_TYPE always come from CMake here (the
// commit from the header cmake/git_commit.cmake writes at build time).

namespace cusnap::cli {

std::string CliBuildInfo() {
  return std::string("cusnap " CUSNAP_VERSION " commit " CUSNAP_GIT_COMMIT " cuda-headers ") +
         std::to_string(CUDA_VERSION) + " build " CUSNAP_BUILD_TYPE;
}

std::string ShimBuildInfoInFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  // One block read: a character-by-character read of a 26 MB sanitised shim took seconds.
  const std::streamoff size = in.tellg();
  if (size <= 0) return "";
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return "";
  // The string literal of cusnap_build_info() in .rodata: "cusnap <v> commit <c> ...\0".
  for (size_t at = bytes.find("cusnap "); at != std::string::npos;
       at = bytes.find("cusnap ", at + 1)) {
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos) break;
    const std::string text = bytes.substr(at, end - at);
    if (text.find(" commit ") != std::string::npos && text.find(" build ") != std::string::npos &&
        text.find('%') == std::string::npos) {
      return text;
    }
  }
  return "";
}

std::string ShimPath() { return SelfDir() + "/../lib/libcusnap.so"; }

}  // namespace cusnap::cli
