// kCheckResources (control thread): before anything destructive, does this process have what
// the rest of the checkpoint and its restore need? Descriptors for the restore's imports
// (RLIMIT_NOFILE minus the descriptors open now, against the imports plus a margin), and host
// memory for the carrier's arena (the cgroup v2 memory.max minus memory.current of this
// process's cgroup and of every ancestor, and RLIMIT_AS minus the address space's size,
// against the bytes the arena still has to grow by). Read-only: /proc, /sys/fs/cgroup and
// getrlimit; no driver call, nothing of the shim's (the caller asks the carrier).
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/messages.h"

namespace cusnap::shim {

/// Descriptors kept spare beyond the restore's imports: the endpoint's connections, the
/// control socket's reply, /proc reads and the application's own descriptors in between.
inline constexpr uint64_t kDescriptorMargin = 16;

/// What this process has (ResourcesReply), or, when something falls short, an error (code -1)
/// naming the process, each resource short, the amount needed and the amount available.
/// `carrier_growth`: the bytes the carrier's arena still has to grow by to hold
/// need.carrier_bytes (HostCarrier::GrowthFor: what it holds from an earlier cycle is not
/// new memory).
Result<proto::ResourcesReply> CheckResources(const proto::ResourcesRequest& need,
                                             uint64_t carrier_growth);

/// The least free memory (bytes) over the cgroups that `membership` (the text of
/// /proc/self/cgroup) names and their ancestors, under `cgroup_root` (/sys/fs/cgroup): a
/// parent's limit caps its children. cgroup v2 ("0::<path>"): memory.max - memory.current;
/// cgroup v1's memory controller ("<n>:...memory...:<path>", under <cgroup_root>/memory):
/// memory.limit_in_bytes - memory.usage_in_bytes. ResourcesReply::kUnlimited without such a
/// line or when no level has both files with numbers ("max" is no limit).
uint64_t FreeCgroupMemory(const std::string& membership, const std::string& cgroup_root);

/// Tests only: a folder that stands in for /sys/fs/cgroup, with the membership file "cgroup"
/// that stands in for /proc/self/cgroup (CheckResources).
inline constexpr const char* kTestCgroupRootEnv = "CUSNAP_TEST_CGROUP_ROOT";

}  // namespace cusnap::shim
