// `cusnap inspect <state dir>`: what a checkpoint recorded, read from its state file.
#include <cuda.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/output.h"
#include "common/text.h"
#include "coordinator/record/records.h"
#include "coordinator/record/state_file.h"

namespace cusnap::cli {
namespace {

/// Where an allocation lives, in words: "device 1", "host NUMA node 0", "host memory"
/// (CUmemLocationType), else the raw type and id.
std::string LocationText(int type, int id) {
  switch (type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return "device " + std::to_string(id);
    case CU_MEM_LOCATION_TYPE_HOST: return "host memory";
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: return "host NUMA node " + std::to_string(id);
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return "host NUMA node of the calling thread";
    default: return "location type " + std::to_string(type) + " id " + std::to_string(id);
  }
}

}  // namespace

int InspectCommand(const std::string& given, bool json) {
  // The state file itself names its directory (a user often has its path at hand).
  std::error_code ec;
  const std::filesystem::path path(given);
  const bool file = std::filesystem::is_regular_file(path, ec) &&
                    path.filename() == std::filesystem::path(coord::StateFilePath("")).filename();
  std::string state_dir = file ? path.parent_path().string() : given;
  if (state_dir.empty()) state_dir = ".";
  Result<coord::StateFile> state = Error{ENOENT, state_dir + " does not exist"};
  if (std::filesystem::exists(state_dir, ec)) state = coord::ReadStateFile(state_dir);
  if (!state) {
    if (json) {
      std::printf("%s\n", nlohmann::json{{"state_dir", state_dir},
                                         {"state_file", coord::StateFilePath(state_dir)},
                                         {"exit_code", kExitError},
                                         {"errors", {state.error().message}}}.dump(2).c_str());
    }
    std::fprintf(stderr, "cusnap inspect: %s\n", state.error().message.c_str());
    return kExitError;
  }
  if (json) {
    std::printf("%s\n", coord::StateToJson(*state).dump(2).c_str());
    return kExitOk;
  }
  const std::time_t created = static_cast<std::time_t>(state->created_unix_s);
  char when[64] = "?";
  if (std::tm tm{}; ::gmtime_r(&created, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::printf("state file: %s\n", coord::StateFilePath(state_dir).c_str());
  std::printf("format version %d, driver %s, written %s, checkpoint %s\n",
              state->format_version, state->driver.c_str(), when, state->checkpoint_id.c_str());
  std::printf("%zu participant%s\n", state->participants.size(),
              state->participants.size() == 1 ? "" : "s");
  for (const auto& p : state->participants) {
    std::map<std::string, size_t> kinds;
    for (const auto& r : p.records) ++kinds[coord::KindName(r.kind)];
    std::printf("%s: %s saved",
                ProcessText(p.pid, "start " + std::to_string(p.start_time)).c_str(),
                FormatBytes(p.saved_bytes).c_str());
    for (const auto& [kind, n] : kinds) std::printf(", %zu %s%s", n, kind.c_str(), n == 1 ? "" : "s");
    std::printf("\n");
    for (const auto& g : p.gpus) std::printf("    device %d: %s\n", g.ordinal, g.uuid.c_str());
    for (const auto& r : p.records) {
      const bool creator = r.flags & proto::kCreator;
      if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation)) {
        std::printf("    %s: %s, %s, in %s, %u handle%s\n", coord::ObjectName(r.id).c_str(),
                    FormatBytes(r.object_size).c_str(), creator ? "created here" : "imported",
                    LocationText(r.location_type, r.location_id).c_str(), r.handle_count,
                    r.handle_count == 1 ? "" : "s");
      } else if (r.kind == static_cast<uint32_t>(proto::RecordKind::kMapping)) {
        std::printf("    mapping %s+%s of %s at offset %llu, %u access descriptor%s\n",
                    coord::Hex(r.address).c_str(), FormatBytes(r.size).c_str(),
                    coord::ObjectName(r.id).c_str(), static_cast<unsigned long long>(r.offset),
                    r.access_count, r.access_count == 1 ? "" : "s");
      } else {
        std::printf("    %s of %s\n", coord::KindName(r.kind).c_str(),
                    coord::MulticastName(r.id).c_str());
      }
    }
  }
  for (const auto& ph : state->phases) {
    std::printf("phase %-16s %8.1f ms  %s\n", ph.name.c_str(), ph.elapsed_ms,
                FormatBytes(ph.bytes).c_str());
  }
  // The file is written in write_state, so it cannot hold that phase's time nor those after
  // (every one of them is named, commit included).
  std::printf("phases write_state, commit, detach_multicast, release, lock and checkpoint (and "
              "a dump's write_carriers) ran while and after this file was written: their times "
              "are in the output of the command that wrote it\n");
  return kExitOk;
}

}  // namespace cusnap::cli
