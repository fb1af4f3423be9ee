// /proc readers (proc.h).
#include "coordinator/proc.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/endpoint_client.h"

namespace cusnap::coord {

std::optional<uint64_t> ProcessStartTime(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // comm (field 2) may contain spaces and parentheses: fields resume after the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  // rest starts at field 3 (state); field 22 is the 20th token from here.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

/// Parent pid of `pid` (/proc/<pid>/stat field 4), or -1.
int ParentPid(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 2));
  std::string state;
  int ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

/// Children of `pid` from /proc/<pid>/task/*/children, or nullopt when the kernel lacks
/// those files (CONFIG_PROC_CHILDREN off).
std::optional<std::vector<int>> ChildrenFromTasks(int pid) {
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::vector<int> children;
  bool any_file = false;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(task_dir, ec)) {
    std::ifstream in(task.path() / "children");
    if (!in) continue;
    any_file = true;
    int child = 0;
    while (in >> child) children.push_back(child);
  }
  if (!any_file) return std::nullopt;
  return children;
}

/// Children of `pid` by scanning every /proc/<n>/stat for its parent pid.
std::vector<int> ChildrenFromScan(int pid) {
  std::vector<int> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int candidate = std::stoi(name);
    if (ParentPid(candidate) == pid) children.push_back(candidate);
  }
  return children;
}

}  // namespace

std::vector<int> ProcessTree(int pid) {
  std::vector<int> out;
  if (!ProcessStartTime(pid)) return out;
  std::set<int> seen{pid};
  out.push_back(pid);
  for (size_t i = 0; i < out.size(); ++i) {
    // One named vector (not a conditional temporary): GCC 12 at -O2 reports a bogus
    // -Wfree-nonheap-object on the temporary of `a ? *opt : f()`.
    auto children = ChildrenFromTasks(out[i]);
    const std::vector<int> found = children ? std::move(*children) : ChildrenFromScan(out[i]);
    for (int child : found) {
      if (seen.insert(child).second) out.push_back(child);
    }
  }
  return out;
}

namespace {

/// Pids of every "<pid>.sock" in `control_dir` whose process exists (`alive`) or does not.
std::vector<int> SocketPids(const std::string& control_dir, bool alive) {
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(control_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() < 6 || name.substr(name.size() - 5) != ".sock") continue;
    const std::string digits = name.substr(0, name.size() - 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const int pid = std::stoi(digits);
    if (pid > 0 && ProcessStartTime(pid).has_value() == alive) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace

std::vector<int> EndpointPids(const std::string& control_dir) {
  return SocketPids(control_dir, true);
}

std::vector<int> StaleEndpointPids(const std::string& control_dir) {
  return SocketPids(control_dir, false);
}

bool HasEndpoint(const std::string& control_dir, int pid) {
  struct stat st {};
  return ::stat(EndpointPath(control_dir, pid).c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

std::vector<int> EndpointPidsInTree(const std::string& control_dir, int pid) {
  std::vector<int> out;
  for (int p : ProcessTree(pid)) {
    if (p != ::getpid() && HasEndpoint(control_dir, p)) out.push_back(p);
  }
  return out;
}

std::string ProcessName(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";
  return name;
}

}  // namespace cusnap::coord
