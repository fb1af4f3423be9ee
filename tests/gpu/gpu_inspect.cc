// gpu_inspect: asks one process's cusnap endpoint for its identity (kIdentify) and its
// sharing table (kInspect) through the protocol of src/common/messages.h, and prints one
// JSON line of counts: allocation records by role (created here / imported) and by location
// type (DEVICE, HOST_NUMA = 3, other), mapping records, bytes. test_nccl_allreduce.py uses
// it to show that the NCCL allocations of a rank are tracked.
//
//   gpu_inspect --pid <pid> [--records]      (control dir: $CUSNAP_CONTROL_DIR or default)
//
// Exit status: 0 with the JSON line; 1 when the endpoint cannot be reached or refuses.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/endpoint_client.h"

namespace {

using cusnap::proto::Record;
using cusnap::proto::RecordKind;

constexpr int kTimeoutMs = 30'000;

unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }

}  // namespace

int main(int argc, char** argv) {
  int pid = 0;
  bool print_records = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pid") == 0 && i + 1 < argc) {
      pid = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--records") == 0) {
      print_records = true;
    } else {
      std::fprintf(stderr, "usage: gpu_inspect --pid <pid> [--records]\n");
      return 2;
    }
  }
  if (pid <= 0) {
    std::fprintf(stderr, "gpu_inspect: --pid is required\n");
    return 2;
  }
  const std::string path = cusnap::EndpointPath(cusnap::ControlDir(), pid);

  auto identify = cusnap::Request<cusnap::proto::IdentifyReply>(
      path, cusnap::proto::IdentifyRequest{}.Encode(), kTimeoutMs);
  if (!identify.ok()) {
    std::fprintf(stderr, "gpu_inspect: pid %d: kIdentify on %s failed: %s (code %d)\n", pid,
                 path.c_str(), identify.error().message.c_str(), identify.error().code);
    return 1;
  }
  auto inspect = cusnap::Request<cusnap::proto::InspectReply>(
      path, cusnap::proto::InspectRequest{}.Encode(), kTimeoutMs);
  if (!inspect.ok()) {
    std::fprintf(stderr, "gpu_inspect: pid %d: kInspect on %s failed: %s (code %d)\n", pid,
                 path.c_str(), inspect.error().message.c_str(), inspect.error().code);
    return 1;
  }

  uint64_t allocations = 0, created = 0, imported = 0, device = 0, host_numa = 0, other = 0;
  uint64_t mappings = 0, shared = 0, created_bytes = 0, host_numa_bytes = 0, mapped_bytes = 0;
  uint64_t other_records = 0;
  for (const Record& r : inspect->records) {
    if (print_records) {
      std::fprintf(stderr,
                   "record kind %u flags 0x%x object %d/%llu/%llu va 0x%llx size %llu offset %llu "
                   "object_size %llu location %d/%d handle_types 0x%x access %u\n",
                   r.kind, r.flags, r.id.creator_pid, U(r.id.creator_start), U(r.id.local_id),
                   U(r.address), U(r.size), U(r.offset), U(r.object_size), r.location_type,
                   r.location_id, r.handle_types, r.access_count);
    }
    if (r.kind == static_cast<uint32_t>(RecordKind::kMapping)) {
      ++mappings;
      mapped_bytes += r.size;
      continue;
    }
    if (r.kind != static_cast<uint32_t>(RecordKind::kAllocation)) {
      ++other_records;
      continue;
    }
    ++allocations;
    const bool creator = (r.flags & cusnap::proto::kCreator) != 0;
    created += creator ? 1 : 0;
    imported += creator ? 0 : 1;
    shared += (r.flags & cusnap::proto::kShared) ? 1 : 0;
    if (creator) created_bytes += r.object_size;
    if (r.location_type == CU_MEM_LOCATION_TYPE_DEVICE) {
      ++device;
    } else if (r.location_type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
      ++host_numa;
      host_numa_bytes += r.object_size;
    } else {
      ++other;
    }
  }
  const cusnap::proto::IdentifyReply& id = *identify;
  std::printf("{\"pid\": %d, \"phase\": %u, \"identify_records\": %llu, \"untracked_imports\": %llu, "
              "\"tracked_bytes\": %llu, \"records\": %zu, \"allocations\": %llu, \"created\": %llu, "
              "\"imported\": %llu, \"shared\": %llu, \"device\": %llu, \"host_numa\": %llu, "
              "\"other_location\": %llu, \"mappings\": %llu, \"created_bytes\": %llu, "
              "\"host_numa_bytes\": %llu, \"mapped_bytes\": %llu, \"other_records\": %llu, "
              "\"created_total\": %u, \"created_host_numa\": %u}\n",
              pid, static_cast<unsigned>(id.state), U(id.records), U(id.untracked_imports),
              U(id.tracked_bytes), inspect->records.size(),
              U(allocations), U(created), U(imported), U(shared), U(device), U(host_numa), U(other),
              U(mappings), U(created_bytes), U(host_numa_bytes), U(mapped_bytes), U(other_records),
              id.created_total, id.created_host_numa);
  return 0;
}
