// Resources checked before the first destructive step (resources.h).
#include "coordinator/participants/resources.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/settings.h"
#include "common/text.h"
#include "coordinator/proc/processes.h"
#include "coordinator/record/records.h"

namespace cusnap::coord {
namespace {

// Bytes free to an unprivileged writer in the filesystem of `dir`, or the test knob's value.
Result<uint64_t> FreeBytes(const std::string& dir) {
  if (const char* knob = settings::Value(settings::kTestStateDirFreeBytes)) {
    const auto bytes = settings::NumberOf(settings::kTestStateDirFreeBytes, knob);
    if (bytes) return *bytes;
  }
  struct statvfs fs{};
  if (statvfs(dir.c_str(), &fs) != 0) {
    return Error{errno, dir + ": statvfs: " + std::strerror(errno)};
  }
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

/// RssAnon + RssShmem of /proc/<pid>/status, in bytes (0 when unreadable).
uint64_t DumpedMemoryBytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  uint64_t kib = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0 || line.rfind("RssShmem:", 0) == 0) {
      kib += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
    }
  }
  return kib << 10;
}

}  // namespace

proto::ResourcesRequest ResourcesNeeded(const ParticipantView& view) {
  proto::ResourcesRequest need;
  need.carrier_bytes = CreatedBytes(view.records);
  for (const auto& r : view.records) {
    const bool object = r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation) ||
                        r.kind == static_cast<uint32_t>(proto::RecordKind::kMulticast);
    if (object && (r.flags & proto::kCreator) == 0) ++need.imports;
  }
  return need;
}

uint64_t StateFileEstimate(std::span<const ParticipantView> views) {
  // The document's frame, GPU list and phase timings: well under this.
  uint64_t bytes = 16u << 10;
  for (const auto& v : views) {
    bytes += 1024;
    // Each record nests two levels deeper in the file than alone: count its indentation twice.
    for (const auto& r : v.records) bytes += 2 * RecordToJson(r).dump(2).size();
  }
  return bytes;
}

uint64_t ImagesEstimate(int root, std::span<const ParticipantView> views, uint64_t carrier_held) {
  uint64_t resident = 0, carried = 0;
  for (const int pid : ProcessTree(root)) resident += DumpedMemoryBytes(pid);
  for (const auto& v : views) carried += ResourcesNeeded(v).carrier_bytes;
  return std::max(resident - std::min(resident, carrier_held), carried);
}

std::vector<std::string> CheckResourcesAll(
    std::span<const std::unique_ptr<Participant>> participants,
    std::span<const ParticipantView> views, const std::string& state_dir, int images_root) {
  std::vector<std::string> problems;
  uint64_t carrier_held = 0;
  for (size_t i = 0; i < participants.size() && i < views.size(); ++i) {
    auto have = CheckResources(*participants[i], ResourcesNeeded(views[i]));
    if (!have) {
      problems.push_back(have.error().message);
    } else {
      carrier_held += have->carrier_held;
    }
  }
  const uint64_t needed = StateFileEstimate(views) + kStateFileMargin;
  const uint64_t images = images_root > 0 ? ImagesEstimate(images_root, views, carrier_held) : 0;
  Result<uint64_t> free = FreeBytes(state_dir);
  if (!free) {
    problems.push_back(free.error().message);
  } else if (images > 0 && *free < needed + images) {
    problems.push_back("images directory " + state_dir + ": not enough disk space for the " +
                       "dump: at least " + std::to_string(needed + images) + " bytes needed " +
                       "(the larger of the job's memory and the GPU bytes it will carry, " +
                       std::to_string(images) + " bytes, the state file and " +
                       std::to_string(kStateFileMargin) + " spare), " + std::to_string(*free) +
                       " available; free some space or choose another --images-dir");
  } else if (*free < needed) {
    problems.push_back("state directory " + state_dir + ": not enough disk space for the state "
                       "file: " + std::to_string(needed) + " bytes needed (the file, about " +
                       std::to_string(needed - kStateFileMargin) + " bytes, and " +
                       std::to_string(kStateFileMargin) + " spare), " + std::to_string(*free) +
                       " available; free some space or choose another --state-dir");
  }
  return problems;
}

}  // namespace cusnap::coord
