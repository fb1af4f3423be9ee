// What the tests that run CRIU share (tests/integration/cli_images_test.cc, the fault
// matrix's dump and images-restore cases in tests/faults/): finding the criu program, saying
// why it cannot run here (a test then skips with that reason, never fails), and keeping the
// test's own descriptors out of a job CRIU will dump.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_runner.h"
#include "coordinator/images/criu.h"

namespace cusnap::testing {

/// "" when CRIU can dump and restore here, else why not (CRIU's own words). Points
/// CUSNAP_CRIU at scripts/fetch_criu.sh's build (<source>/.criu/bin/criu) when it is there
/// and CUSNAP_CRIU names no other one, so every `cusnap` the test starts uses it.
inline std::string CriuProblem() {
  const std::string fetched = Env("CUSNAP_TEST_SOURCE_DIR") + "/.criu/bin/criu";
  if (Env("CUSNAP_CRIU").empty() && ::access(fetched.c_str(), X_OK) == 0) {
    ::setenv("CUSNAP_CRIU", fetched.c_str(), 1);
  }
  auto criu = coord::FindCriu();
  if (!criu.ok()) return criu.error().message;
  auto version = coord::CriuVersion(*criu);
  if (!version.ok()) return version.error().message;
  const Ran check = RunCommand(*criu + " check 2>&1 | grep -v RLIMIT_NOFILE", "/tmp");
  if (check.out.find("Looks good") == std::string::npos) return *criu + " check: " + check.out;
  return "";
}

/// Marks every descriptor above 2 this process holds close-on-exec. Descriptors a test
/// inherited (ctest's log, open for writing) must not reach a job CRIU dumps: CRIU restores
/// an open regular file only at the size it had at the dump, and the log grows meanwhile.
inline void KeepInheritedDescriptorsFromChildren() {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(e.path().filename().c_str());
    if (fd > 2) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
}

}  // namespace cusnap::testing
