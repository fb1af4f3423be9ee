// kCheckResources (resources.h). Runs on the control thread, never on an application's
// path; the files it reads are small and read with open/read (no stdio, no strtoull: the
// shim's glibc ceiling).
#include "shim/endpoint/resources.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "common/ids.h"
#include "common/text.h"

namespace cusnap::shim {
namespace {

using proto::ResourcesReply;

// The first bytes of a small file (at most 4 KiB); "" when it cannot be read.
std::string ReadSmallFile(const std::string& path) {
  char buf[4096];
  const ssize_t len = cusnap::ReadSmallFile(path.c_str(), buf, sizeof buf);
  return len > 0 ? std::string(buf, static_cast<size_t>(len)) : std::string();
}

// The decimal number a file starts with; false for "max", an empty or an unreadable file.
bool ReadNumber(const std::string& path, uint64_t* value) {
  const std::string text = ReadSmallFile(path);
  const char* p = text.data();
  return ParseDecimal(p, text.data() + text.size(), value);
}

// The soft limit `resource`, or kUnlimited.
uint64_t SoftLimit(int resource) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return ResourcesReply::kUnlimited;
  }
  return limit.rlim_cur;
}

// RLIMIT_NOFILE minus the descriptors open now (the directory's own descriptor not counted).
uint64_t FreeDescriptors() {
  const uint64_t limit = SoftLimit(RLIMIT_NOFILE);
  if (limit == ResourcesReply::kUnlimited) return limit;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    // Not even the descriptor to count with: none is free. Only without /proc is there
    // nothing to go by.
    if (errno == EMFILE || errno == ENFILE) return 0;
    return ResourcesReply::kUnlimited;
  }
  uint64_t open_fds = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++open_fds;
  }
  closedir(dir);
  if (open_fds > 0) --open_fds;
  return limit > open_fds ? limit - open_fds : 0;
}

// RLIMIT_AS minus the address space's size now (/proc/self/statm, first field, in pages).
uint64_t FreeAddressSpace() {
  const uint64_t limit = SoftLimit(RLIMIT_AS);
  if (limit == ResourcesReply::kUnlimited) return limit;
  uint64_t pages = 0;
  if (!ReadNumber("/proc/self/statm", &pages)) return ResourcesReply::kUnlimited;
  const uint64_t size = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return limit > size ? limit - size : 0;
}

// "<resource>: <needed> <unit> needed, <available> available (<detail>)"
std::string Shortfall(const char* resource, uint64_t needed, uint64_t available,
                      const char* unit, const char* detail) {
  return std::string(resource) + ": " + std::to_string(needed) + " " + unit + " needed, " +
         std::to_string(available) + " available (" + detail + ")";
}

// The least `limit_file` - `usage_file` over the cgroup `path` under `root` and its
// ancestors (a parent's limit caps its children); kUnlimited when no level has both numbers.
uint64_t LeastFree(const std::string& root, std::string path, const char* limit_file,
                   const char* usage_file) {
  uint64_t least = ResourcesReply::kUnlimited;
  for (;;) {
    const std::string dir = root + (path == "/" ? std::string() : path);
    uint64_t limit = 0, usage = 0;
    if (ReadNumber(dir + "/" + limit_file, &limit) && ReadNumber(dir + "/" + usage_file, &usage)) {
      least = std::min(least, limit > usage ? limit - usage : 0);
    }
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path == "/") break;
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return least;
}

// Where the resource check reads the cgroup hierarchy and the process's membership:
// /sys/fs/cgroup and /proc/self/cgroup, or, for tests only, the folder
// CUSNAP_TEST_CGROUP_ROOT names and the file "cgroup" in it (a made-up hierarchy of either
// version, without a cgroup of the machine's own).
std::pair<std::string, std::string> CgroupSources() {
  const char* test_root = getenv(kTestCgroupRootEnv);
  if (test_root == nullptr || *test_root == '\0') return {"/sys/fs/cgroup", "/proc/self/cgroup"};
  return {test_root, std::string(test_root) + "/cgroup"};
}

// Whether the comma-separated controller list of a cgroup v1 line names `controller`.
bool NamesController(std::string_view list, std::string_view controller) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == controller) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

uint64_t FreeCgroupMemory(const std::string& membership, const std::string& cgroup_root) {
  uint64_t least = ResourcesReply::kUnlimited;
  // cgroup v2 is the line "0::<path>"; v1's memory controller a line "<n>:<controllers>:<path>"
  // whose controllers include "memory", its hierarchy under <root>/memory. A hybrid host may
  // have both: each limit holds.
  size_t line = 0;
  while (line < membership.size()) {
    size_t end = membership.find('\n', line);
    if (end == std::string::npos) end = membership.size();
    const std::string entry = membership.substr(line, end - line);
    line = end + 1;
    const size_t first = entry.find(':');
    const size_t second = first == std::string::npos ? first : entry.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string_view controllers = std::string_view(entry).substr(first + 1, second - first - 1);
    const std::string path = entry.substr(second + 1);
    if (entry.rfind("0::", 0) == 0) {
      least = std::min(least, LeastFree(cgroup_root, path, "memory.max", "memory.current"));
    } else if (NamesController(controllers, "memory")) {
      least = std::min(least, LeastFree(cgroup_root + "/memory", path, "memory.limit_in_bytes",
                                        "memory.usage_in_bytes"));
    }
  }
  return least;
}

Result<proto::ResourcesReply> CheckResources(const proto::ResourcesRequest& need,
                                             uint64_t carrier_growth) {
  ResourcesReply have;
  have.descriptors_free = FreeDescriptors();
  const auto [cgroup_root, membership] = CgroupSources();
  have.cgroup_memory_free = FreeCgroupMemory(ReadSmallFile(membership), cgroup_root);
  have.address_space_free = FreeAddressSpace();

  std::string shortfalls;
  const auto add = [&](std::string text) {
    shortfalls += (shortfalls.empty() ? "" : "; ") + text;
  };
  const uint64_t descriptors = need.imports + kDescriptorMargin;
  if (have.descriptors_free < descriptors) {
    add(Shortfall("descriptors (RLIMIT_NOFILE)", descriptors, have.descriptors_free,
                  "descriptors", (std::to_string(need.imports) + " for the restore's imports + " +
                                  std::to_string(kDescriptorMargin) + " spare").c_str()));
  }
  const char* carrier = "the carrier's copy of the allocations this process created";
  if (have.cgroup_memory_free < carrier_growth) {
    add(Shortfall("host memory (cgroup memory limit)", carrier_growth, have.cgroup_memory_free,
                  "bytes", carrier));
  }
  if (have.address_space_free < carrier_growth) {
    add(Shortfall("address space (RLIMIT_AS)", carrier_growth, have.address_space_free, "bytes",
                  carrier));
  }
  if (!shortfalls.empty()) {
    return Error{-1, ThisProcess() + ": not enough resources for the checkpoint and its "
                     "restore: " + shortfalls + "; raise the limit or free some, then retry"};
  }
  return have;
}

}  // namespace cusnap::shim
