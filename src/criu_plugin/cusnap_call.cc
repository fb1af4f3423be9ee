#include "criu_plugin/cusnap_call.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "criu_plugin/criu_api.h"

namespace cusnap::criu_plugin {
namespace {

/// The images directory as the command names it (/proc/self/fd/<n>, the descriptor handed
/// down) and as CRIU's log names it for the person who reads it: its path here.
struct ShownName {
  std::string handed;
  std::string path;

  /// `line` with the handed-down name replaced by the path (as it is when there is none).
  std::string In(std::string line) const {
    if (path.empty()) return line;
    for (size_t at = line.find(handed); at != std::string::npos; at = line.find(handed, at + path.size())) {
      line.replace(at, handed.size(), path);
    }
    return line;
  }
};

ShownName ImagesDirName(int images_fd) {
  ShownName name{"/proc/self/fd/" + std::to_string(images_fd), ""};
  char path[PATH_MAX];
  const ssize_t n = ::readlink(name.handed.c_str(), path, sizeof path - 1);
  if (n > 0) name.path.assign(path, static_cast<size_t>(n));
  return name;
}

/// Splits what came from one pipe into lines for CRIU's log, keeping an unfinished last line
/// in `pending`; stdout's "participants:" lines go to `answer`.
void TakeLines(std::string& pending, bool is_stderr, const ShownName& images, CusnapAnswer& answer) {
  for (size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
    const std::string line = images.In(pending.substr(0, end));
    if (!is_stderr && line.rfind("participants:", 0) == 0) {
      answer.participants.clear();
      std::istringstream pids(line.substr(13));
      for (int pid; pids >> pid;) answer.participants.push_back(pid);
      continue;
    }
    CriuLog(is_stderr ? CriuLogLevel::kWarn : CriuLogLevel::kInfo, "cusnap: " + line);
  }
}

}  // namespace

std::string CusnapProgram() {
  if (const char* env = std::getenv("CUSNAP_BIN"); env != nullptr && *env != '\0') return env;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&CusnapProgram), &info) != 0 && info.dli_fname != nullptr) {
    // Through a link (the plugin linked into CRIU's plugin directory): where it really is.
    char real[PATH_MAX];
    std::string path = ::realpath(info.dli_fname, real) != nullptr ? real : info.dli_fname;
    for (int up = 0; up < 2 && path.rfind('/') != std::string::npos; ++up) {
      path.erase(path.rfind('/'));
    }
    path = path.substr(0, path.rfind('/') + 1) + "bin/cusnap";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "cusnap";
}

CusnapAnswer RunCusnap(const std::vector<std::string>& args, int images_fd) {
  CusnapAnswer answer;
  std::vector<std::string> argv_text = {"cusnap", "criu-plugin"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  const ShownName images = ImagesDirName(images_fd);
  argv_text.push_back("--images-dir");
  argv_text.push_back(images.handed);
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string program = CusnapProgram();
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return answer;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return answer;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::fcntl(images_fd, F_SETFD, 0);  // handed down: its number is in --images-dir
    if (program.find('/') != std::string::npos) {
      ::execv(program.c_str(), argv.data());
    } else {
      ::execvp(program.c_str(), argv.data());
    }
    ::dprintf(STDERR_FILENO, "cannot run %s: %s\n", program.c_str(), strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (child < 0) {
    ::close(out[0]);
    ::close(err[0]);
    CriuLog(CriuLogLevel::kError, "cannot start " + program + ": fork failed");
    return answer;
  }
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string pending[2];
  for (int open = 2; open > 0;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        pending[i].append(buffer, static_cast<size_t>(n));
        TakeLines(pending[i], i == 1, images, answer);
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (!pending[i].empty()) {
      pending[i] += '\n';
      TakeLines(pending[i], i == 1, images, answer);
    }
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return answer;
  }
  answer.status = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1);
  return answer;
}

int InnermostPid(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream pids(line.substr(6));
    int last = 0;
    for (int p; pids >> p;) last = p;
    return last;
  }
  return 0;
}

bool HasExited(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;
  const size_t name_end = line.rfind(')');
  if (name_end == std::string::npos || name_end + 2 >= line.size()) return true;
  const char state = line[name_end + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace cusnap::criu_plugin
