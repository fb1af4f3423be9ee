// How libcusnap_criu.so asks cusnap: it runs the `cusnap criu-plugin <action>` command
// (cli/criu_plugin.cc) as a child of CRIU, the way CRIU's CUDA plugin runs cuda-checkpoint,
// so that the plugin holds no checkpoint logic of its own and CRIU's process holds none of
// cusnap's threads. The command's output lines go into CRIU's log.
#pragma once

#include <string>
#include <vector>

namespace cusnap::criu_plugin {

/// What one run of the command answered.
struct CusnapAnswer {
  int status = -1;  ///< its exit status; 128+N when signal N ended it; -1 when it did not run
  /// The pids of the last "participants:" line of its stdout (none: a tree without cusnap).
  std::vector<int> participants;
};

/// The cusnap program: $CUSNAP_BIN when set, else bin/cusnap beside the folder of the
/// plugin's folder (the plugin's own, links followed) (lib/criu/libcusnap_criu.so, as the build and `cmake --install` lay them
/// out), else `cusnap` on PATH.
std::string CusnapProgram();

/// Runs `cusnap criu-plugin <args...>` with CRIU's images directory descriptor `images_fd`
/// handed down and `--images-dir /proc/self/fd/<images_fd>` added; each line it prints goes
/// into CRIU's log (its stderr at warning level). Waits for it to end.
CusnapAnswer RunCusnap(const std::vector<std::string>& args, int images_fd);

/// The pid of process `pid` (as CRIU's PID namespace numbers it) in its innermost PID
/// namespace (the last NSpid of /proc/<pid>/status): how the job's own records name it.
/// 0 when it cannot be read.
int InnermostPid(int pid);

/// Whether process `pid` (CRIU's PID namespace) has exited: gone, or a zombie (state Z or X of
/// /proc/<pid>/stat).
bool HasExited(int pid);

}  // namespace cusnap::criu_plugin
