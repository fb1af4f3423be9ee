// kCheckResources (resources.h). Runs on the control thread, never on an application's
// path; the files it reads are small and read with open/read (no stdio, no strtoull: the
// shim's glibc ceiling).
#include "shim/endpoint/resources.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

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
  if (dir == nullptr) return ResourcesReply::kUnlimited;  // no /proc: nothing to go by
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

}  // namespace

uint64_t FreeCgroupMemory(const std::string& membership, const std::string& cgroup_root) {
  // cgroup v2 is the line "0::<path>".
  size_t at = membership.rfind("0::", 0) == 0 ? 0 : membership.find("\n0::");
  if (at == std::string::npos) return ResourcesReply::kUnlimited;
  at += membership[at] == '\n' ? 4 : 3;
  std::string path = membership.substr(at, membership.find('\n', at) - at);
  uint64_t least = ResourcesReply::kUnlimited;
  for (;;) {
    const std::string dir = cgroup_root + (path == "/" ? std::string() : path);
    uint64_t max = 0, current = 0;
    if (ReadNumber(dir + "/memory.max", &max) && ReadNumber(dir + "/memory.current", &current)) {
      least = std::min(least, max > current ? max - current : 0);
    }
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos || path == "/") break;
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return least;
}

Result<proto::ResourcesReply> CheckResources(const proto::ResourcesRequest& need,
                                             uint64_t carrier_growth) {
  ResourcesReply have;
  have.descriptors_free = FreeDescriptors();
  have.cgroup_memory_free =
      FreeCgroupMemory(ReadSmallFile("/proc/self/cgroup"), "/sys/fs/cgroup");
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
    add(Shortfall("host memory (cgroup memory.max)", carrier_growth, have.cgroup_memory_free,
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
