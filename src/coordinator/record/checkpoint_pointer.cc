// Checkpoint pointers (checkpoint_pointer.h).
#include "coordinator/record/checkpoint_pointer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/unique_fd.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {

std::string CheckpointPointerPath(const std::string& control_dir, int pid) {
  return control_dir + "/" + std::to_string(pid) + ".checkpoint";
}

Status WriteCheckpointPointer(const std::string& control_dir, int pid, uint64_t start_time,
                              const std::string& state_dir) {
  std::error_code ec;
  const std::string absolute =
      std::filesystem::absolute(state_dir, ec).lexically_normal().string();
  const std::string path = CheckpointPointerPath(control_dir, pid);
  const std::string tmp = path + ".tmp";
  const std::string text = std::to_string(start_time) + " " + (ec ? state_dir : absolute) + "\n";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  const bool written =
      fd.get() >= 0 &&
      ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = errno;
    ::unlink(tmp.c_str());
    return Error{why, "cannot write " + path + ": " + std::strerror(why)};
  }
  return Ok{};
}

std::optional<std::string> CheckpointStateDirOf(const std::string& control_dir, int pid) {
  std::ifstream in(CheckpointPointerPath(control_dir, pid));
  uint64_t start_time = 0;
  std::string state_dir;
  if (!(in >> start_time) || !std::getline(in >> std::ws, state_dir) || state_dir.empty()) {
    return std::nullopt;
  }
  if (ProcessStartTime(pid) != start_time) return std::nullopt;
  return state_dir;
}

std::vector<std::string> StaleCheckpointPointers(const std::string& control_dir) {
  std::vector<std::string> stale;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(control_dir, ec)) {
    const std::optional<int> pid = PidOfFileName(e.path().filename().string(), ".checkpoint");
    if (pid && !CheckpointStateDirOf(control_dir, *pid)) stale.push_back(e.path().string());
  }
  return stale;
}

void RemoveCheckpointPointers(const std::string& control_dir, const std::vector<int>& pids) {
  for (int pid : pids) ::unlink(CheckpointPointerPath(control_dir, pid).c_str());
}

}  // namespace cusnap::coord
