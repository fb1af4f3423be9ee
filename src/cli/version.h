// Which cusnap this is (`cusnap --version`) and which shim a job runs (`cusnap status`).
#pragma once

#include <string>

namespace cusnap::cli {

/// This program's build: "cusnap <version> commit <git commit> cuda-headers <CUDA_VERSION>
/// build <type>", the same fields and format as the shim's cusnap_build_info().
std::string CliBuildInfo();

/// The shim's build-info string read from the library file at `path` (the text
/// cusnap_build_info() returns, found in the file without loading it); "" when the file
/// cannot be read or holds none.
std::string ShimBuildInfoInFile(const std::string& path);

/// The shim `cusnap run` preloads: <dir of this program>/../lib/libcusnap.so.
std::string ShimPath();

}  // namespace cusnap::cli
