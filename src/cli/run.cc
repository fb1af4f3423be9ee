// `cusnap run`: start a command with the shim preloaded (DESIGN.md, "Environment").
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/checks.h"
#include "cli/commands.h"
#include "cli/version.h"
#include "cli/exit_codes.h"
#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "coordinator/native_driver.h"

namespace cusnap::cli {
namespace {

/// Sets `name` to `first` followed by its old value (separated by `sep`), if any.
void Prepend(const char* name, const std::string& first, char sep) {
  const char* old = std::getenv(name);
  std::string value = first;
  if (old && *old) value += sep + std::string(old);
  ::setenv(name, value.c_str(), 1);
}

}  // namespace

int RunCommand(const std::vector<std::string>& command) {
  const std::string bin = SelfDir();
  const std::string shim = ShimPath();
  // Before the job starts: its shim could not create its endpoint there, and would say so
  // only on the job's stderr.
  if (const std::string problem = CheckControlDirLength(ControlDir()); !problem.empty()) {
    std::fprintf(stderr, "cusnap run: %s\n", problem.c_str());
    return kExitUsage;
  }
  // Nor in a directory it must not trust (issue 12): not ours, not 0700, a symbolic link.
  if (const std::string unsafe = UnsafeControlDir(ControlDir()); !unsafe.empty()) {
    std::fprintf(stderr, "cusnap run: %s; the job was not started\n", unsafe.c_str());
    return kExitUsage;
  }
  if (::access(shim.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "cusnap run: the shim %s is missing: %s\n", shim.c_str(),
                 std::strerror(errno));
    return kExitError;
  }
  const char* env = std::getenv("CUSNAP_DRIVER");
  auto choice = coord::ParseDriverChoice(env ? env : "");
  if (!choice) {
    std::fprintf(stderr, "cusnap run: %s\n", choice.error().message.c_str());
    return kExitUsage;
  }
  auto simulated = coord::WouldUseSimulated(*choice, bin);
  if (!simulated) {
    std::fprintf(stderr, "cusnap run: %s\n", simulated.error().message.c_str());
    return kExitError;
  }
  // LD_PRELOAD entries may be separated by spaces or colons; colon keeps paths with spaces.
  Prepend("LD_PRELOAD", shim, ':');
  if (*simulated) Prepend("LD_LIBRARY_PATH", coord::SimulatedDriverDir(bin), ':');
  // What `cusnap dump` (CRIU) needs from the job, unless the user chose otherwise: PyTorch's
  // TCPStore on its libuv backend holds an io_uring instance, which CRIU cannot dump
  // ("anon_inode:[io_uring]", DRIVER-FACTS "Machine notes"); USE_LIBUV=0 selects the classic
  // backend (UV_USE_IO_URING=0 and TORCH_TCPSTORE_USE_LIBUV=0 do not remove it).
  ::setenv("USE_LIBUV", "0", /*overwrite=*/0);

  // A session whose leader is outside this PID namespace (`docker exec`, a container
  // runtime, a CI runner) makes the job one CRIU refuses to dump (proc.h OwnSessionId): the
  // job gets a session of its own. setsid fails for a process-group leader (a shell with job
  // control made us one); then `cusnap dump` refuses, naming the fix.
  if (::getsid(0) == 0 && ::setsid() < 0) {
    std::fprintf(stderr, "cusnap run: note: the job's session leader is outside its PID "
                         "namespace and setsid failed (%s): `cusnap dump` will refuse this job; "
                         "start it with `setsid cusnap run -- ...`\n", std::strerror(errno));
  }

  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "cusnap run: cannot execute %s: %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;  // the shell's convention
}

}  // namespace cusnap::cli
