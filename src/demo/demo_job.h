// The job `cusnap demo` runs: a creator and an importer (cusnap-demo-worker), each started
// through `cusnap run` as the demo's own children, each answering on a control socket
// (demo_protocol.h). The job never outlives the demo: any worker still running when the
// DemoJob is destroyed is killed and reaped.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>

#include "demo/demo_protocol.h"
#include "common/error.h"

namespace cusnap::cli::demo {

/// Deadline for one answer from a worker, in ms. Setting up or checking gigabytes through
/// pageable copies takes seconds; anything past this is a hung worker.
inline constexpr int kAnswerTimeoutMs = 300'000;

enum Role : size_t { kCreator = 0, kImporter = 1 };

class DemoJob {
 public:
  DemoJob() = default;
  ~DemoJob();
  DemoJob(const DemoJob&) = delete;
  DemoJob& operator=(const DemoJob&) = delete;

  /// Starts both workers: `<bin>/cusnap run -- <worker> <role> <device> <sizes...>`, sizes
  /// in bytes; <worker> is <bin>/cusnap-demo-worker in the build tree, else the installed
  /// <bin>/../libexec/cusnap/cusnap-demo-worker. Errors: the spawn failed (errno named).
  Status Start(const std::string& bin, const std::array<int, 2>& devices,
               const std::array<uint64_t, kAllocations>& sizes);

  /// Sends one request line to `role` (no newline) and returns its answer line; an answer
  /// that does not start with `expect` (e.g. "ok") is an Error carrying it, as is a worker
  /// that exited or did not answer within kAnswerTimeoutMs.
  Result<std::string> Ask(Role role, const std::string& request, const std::string& expect);
  /// Waits for the next line from `role` (the start-up answer), checked like Ask.
  Result<std::string> Answer(Role role, const std::string& expect);

  /// Sends "exit" to both, waits for "bye" and for each to exit; Error unless both exited 0.
  Status Stop();

  pid_t pid(Role role) const { return workers_[role].pid; }

 private:
  struct Worker {
    pid_t pid = -1;
    int control = -1;  ///< the demo's end of the control socket
    std::string pending;  ///< bytes read past the last line
  };
  /// SIGKILL and reap whatever still runs; close the sockets.
  void Kill();
  Worker workers_[2];
};

/// "creator" / "importer".
const char* RoleName(Role role);

}  // namespace cusnap::cli::demo
