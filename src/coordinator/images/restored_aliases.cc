// Start-time aliases (restored_aliases.h).
#include "coordinator/images/restored_aliases.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/ids.h"
#include "coordinator/participants/endpoints.h"
#include "coordinator/proc/processes.h"

namespace cusnap::coord {

std::vector<RestoredAlias> RestoredAliases(const std::string& control_dir) {
  std::vector<RestoredAlias> aliases;
  for (const std::string& dir : JobControlDirs(control_dir)) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/restored", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      RestoredAlias a{e.path().string(), std::atoi(name.c_str())};
      std::ifstream in(e.path());
      if (in >> a.outside >> a.inside >> a.original) aliases.push_back(std::move(a));
    }
  }
  return aliases;
}

std::vector<std::string> StaleRestoredAliases(const std::string& control_dir) {
  std::set<uint64_t> started;
  for (const int pid : AllPids()) {
    if (const uint64_t t = KernelStartTime(pid); t != 0) started.insert(t);
  }
  std::vector<std::string> stale;
  if (started.empty()) return stale;  // no /proc to judge by
  for (const RestoredAlias& a : RestoredAliases(control_dir)) {
    if (!started.contains(a.outside) && !started.contains(a.inside)) stale.push_back(a.path);
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

int RunningRestoredCopy(const std::string& control_dir, int pid, uint64_t original) {
  std::vector<uint64_t> restored;  // new start times of copies of the dumped process
  for (const RestoredAlias& a : RestoredAliases(control_dir)) {
    if (a.pid == pid && a.original == original) restored.push_back(a.outside);
  }
  if (restored.empty()) return 0;
  return FindByInnermostPid(pid, [&](uint64_t started) {
    return std::find(restored.begin(), restored.end(), started) != restored.end();
  });
}

}  // namespace cusnap::coord
