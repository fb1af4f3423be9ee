// endpoint_fork_child: a parent that never uses CUDA (started with `cusnap run`, so it carries
// the shim) forks a child without exec; the child's only driver call is `<entry point>` (one
// that is not cuInit), then it prints "called <pid> <CUresult>" and waits for end of input.
//
//   endpoint_fork_child driver-version|ipc-get
//
// cli_endpoint_test checks that the child has an endpoint: every process under the shim gets
// one at its first driver call, whatever entry point that is.
//
//   endpoint_fork_child threads
//
// prints "threads <name> <name>..." (the threads other than main's, by /proc/self/task/*/comm)
// as main starts, and exits 0: the shim's endpoint threads must be running by then.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

int PrintThreads() {
  std::string names;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    if (task.path().filename() == std::to_string(::getpid())) continue;
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    names += " " + name;
  }
  std::printf("threads%s\n", names.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "threads") == 0) return PrintThreads();
  const pid_t child = ::fork();
  if (child < 0) return 3;
  if (child == 0) {
    CUresult r = CUDA_SUCCESS;
    if (std::strcmp(argv[1], "driver-version") == 0) {
      int version = 0;
      r = cuDriverGetVersion(&version);
    } else {
      CUipcMemHandle handle{};
      r = cuIpcGetMemHandle(&handle, 0);
    }
    std::printf("called %d %d\n", static_cast<int>(::getpid()), static_cast<int>(r));
    std::fflush(stdout);
    char byte = 0;
    while (::read(0, &byte, 1) > 0) {
    }
    std::_Exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
}
