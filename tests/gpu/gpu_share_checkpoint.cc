// gpu_share_checkpoint (GPU): the job that test_share_checkpoint.py checkpoints and
// restores with `cusnap`. Two roles started by gpu_pair_launcher, one GPU each:
//
//   role a (GPU 0) creates one POSIX-capable allocation per --sizes entry (default 64 MiB,
//     1 GiB, 4 GiB), fills each with its own pattern and sends b a ticket for each;
//   role b (GPU 1) creates --b-bytes (default 256 MiB) on its GPU, and with --host-numa-bytes
//     also a HOST_NUMA allocation, and sends a a ticket for each;
//   each imports the other's allocations, maps them at its own VAs with access for its own
//   GPU, and checks every byte of them.
//
// Then a prints "@@READY" and reads commands from its standard input (the harness):
//   verify  after a restore: both roles check every byte of every allocation they map, that
//           each VA still has its address range and (with the shim) its logical handle; then
//           sharing: a rewrites its allocations but the largest, b checks them through its
//           imports; b rewrites its own, a checks them. a prints "@@ROUND <n> PASS|FAIL".
//   quit    (or end of input) both unmap and release everything; a prints "@@DONE".
//
//   gpu_pair_launcher -- gpu_share_checkpoint [--sizes 64M,1G,4G] [--b-bytes 256M]
//                                              [--host-numa-bytes 0]
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "gpu/gpu_check.h"
#include "gpu/gpu_pattern.h"
#include "gpu/gpu_peer.h"
#include "gpu/gpu_region.h"
#include "gpu/gpu_vmm.h"
#include "shim/tables/handles.h"

namespace {

enum : uint32_t {
  kTicket = 1,      // index, bytes, seed, value = number of tickets; descriptor attached
  kSetupDone = 2,   // b -> a: b checked a's allocations (index 1 = ok)
  kVerify = 3,      // a -> b: value = round
  kVerifyDone = 4,  // b -> a: index 1 = every check passed
  kRewritten = 5,   // sender rewrote its allocation `index` with `seed`
  kRewriteDone = 6, // receiver checked all rewrites (index 1 = ok)
  kQuit = 7,
};
constexpr int kPeerTimeoutMs = 600'000;  // b waits for a while the harness checkpoints

struct Options {
  std::string role;
  int peer = -1;
  std::vector<size_t> sizes{size_t{64} << 20, size_t{1} << 30, size_t{4} << 30};
  size_t b_bytes = size_t{256} << 20;
  size_t host_numa_bytes = 0;
};

// One allocation this role maps: its own (created here) or an import of the peer's.
struct Region : gpu::Region {
  bool own = false;
};

using gpu::LocationOf;

unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }

class Role {
 public:
  Role(const Options& options, int device) : options_(options), device_(device) {}

  // Creates an allocation with `prop`, maps it for this role's GPU, fills a pattern.
  void CreateOwn(const std::string& name, size_t bytes, const CUmemAllocationProp& prop, uint64_t seed) {
    Region r;
    r.name = name;
    r.own = true;
    r.bytes = gpu::RoundUp(bytes, gpu::Granularity(prop));
    r.handle = gpu::CreateAllocation(r.bytes, prop);
    r.va = gpu::MapWithAccess(r.handle, r.bytes, device_);
    r.seed = seed;
    r.location = LocationOf(r.handle);
    const double start = gpu::NowSeconds();
    gpu::FillPattern(r.va, r.bytes, r.seed);
    gpu::Log("created %s: %zu bytes at location %d/%d, handle 0x%llx, VA 0x%llx (filled in %.2f s)",
             name.c_str(), r.bytes, static_cast<int>(prop.location.type), prop.location.id,
             U(r.handle), U(r.va), gpu::NowSeconds() - start);
    if (gpu::ShimLoaded() && !cusnap::shim::IsTagged(r.handle)) {
      gpu::Fail("%s: cuMemCreate returned 0x%llx, not a logical handle", name.c_str(), U(r.handle));
    }
    regions_.push_back(r);
  }

  // Sends a ticket for every own allocation.
  void SendTickets() {
    uint32_t count = 0;
    for (const Region& r : regions_) count += r.own ? 1 : 0;
    uint32_t index = 0;
    for (const Region& r : regions_) {
      if (!r.own) continue;
      const int fd = gpu::ExportPosix(r.handle);
      gpu::SendPeer(options_.peer, gpu::PeerMessage{kTicket, index++, r.bytes, r.seed, count}, fd);
      close(fd);
    }
  }

  // Receives the peer's tickets, imports and maps each for this role's GPU.
  void ReceiveTickets(const std::string& peer_name) {
    uint64_t count = 1;
    for (uint64_t i = 0; i < count; ++i) {
      int fd = -1;
      const gpu::PeerMessage m = gpu::ExpectPeer(options_.peer, kTicket, kPeerTimeoutMs, &fd);
      if (fd < 0) gpu::Fail("ticket %u from %s carried no descriptor", m.index, peer_name.c_str());
      count = m.value;
      Region r;
      r.name = peer_name + "'s allocation " + std::to_string(m.index) + " (import)";
      r.handle = gpu::ImportPosix(fd);
      close(fd);
      r.bytes = m.bytes;
      r.seed = m.seed;
      r.va = gpu::MapWithAccess(r.handle, r.bytes, device_);
      r.location = LocationOf(r.handle);
      gpu::Log("imported %s: %zu bytes, handle 0x%llx, VA 0x%llx", r.name.c_str(), r.bytes,
               U(r.handle), U(r.va));
      if (gpu::ShimLoaded() && !cusnap::shim::IsTagged(r.handle)) {
        gpu::Fail("%s: the import returned 0x%llx, not a logical handle", r.name.c_str(), U(r.handle));
      }
      imports_.push_back(regions_.size());
      regions_.push_back(r);
    }
  }

  // Checks every byte of the regions selected by `imports_only`; that each VA still belongs
  // to a mapping of the same range; and that the application's handle still names an
  // allocation at the same location (logical handles survive checkpoint and restore).
  bool VerifyRegions(bool imports_only, const char* when) {
    bool ok = true;
    const double start = gpu::NowSeconds();
    size_t bytes = 0;
    for (const Region& r : regions_) {
      if (imports_only && r.own) continue;
      ok = gpu::VerifyRegion(r, when) && ok;
      bytes += r.bytes;
    }
    const double seconds = gpu::NowSeconds() - start;
    gpu::Log("checked %zu bytes %s in %.2f s: %s", bytes, when, seconds, ok ? "all correct" : "WRONG");
    return ok;
  }

  // Writes a new pattern into own regions (all but the largest when `skip_largest`) and
  // tells the peer; returns after the peer checked them.
  bool RewriteOwn(uint64_t round, bool skip_largest) {
    size_t largest = 0;
    for (const Region& r : regions_) largest = r.own && r.bytes > largest ? r.bytes : largest;
    uint32_t index = 0;
    for (Region& r : regions_) {
      if (!r.own) continue;
      const uint32_t this_index = index++;
      if (skip_largest && r.bytes == largest && largest != 0) {
        skip_largest = false;
        continue;
      }
      r.seed = r.seed * 31 + 0x1000 + round;
      gpu::FillPattern(r.va, r.bytes, r.seed);
      gpu::Log("rewrote %s with pattern 0x%llx", r.name.c_str(), U(r.seed));
      gpu::SendPeer(options_.peer, gpu::PeerMessage{kRewritten, this_index, r.bytes, r.seed, 0});
    }
    gpu::SendPeer(options_.peer, gpu::PeerMessage{kRewriteDone, 0, 0, 0, 0});
    const gpu::PeerMessage reply = gpu::ExpectPeer(options_.peer, kRewriteDone, kPeerTimeoutMs);
    return reply.index == 1;
  }

  // Receives the peer's rewrites (until its kRewriteDone), checks them through the imports,
  // and answers with the verdict.
  bool CheckPeerRewrites() {
    bool ok = true;
    for (;;) {
      const gpu::PeerMessage m = gpu::RecvPeer(options_.peer, kPeerTimeoutMs);
      if (m.type == kRewriteDone) break;
      if (m.type != kRewritten || m.index >= imports_.size()) gpu::Fail("unexpected message type %u", m.type);
      Region& r = regions_[imports_[m.index]];
      r.seed = m.seed;
      const std::string what = r.name + " rewritten by the peer";
      ok = gpu::VerifyPattern(r.va, r.bytes, r.seed, what.c_str()) && ok;
    }
    gpu::SendPeer(options_.peer, gpu::PeerMessage{kRewriteDone, ok ? 1u : 0u, 0, 0, 0});
    return ok;
  }

  void ReleaseAll() {
    for (const Region& r : regions_) gpu::ReleaseRegion(r);
    regions_.clear();
    imports_.clear();
  }

  int device() const { return device_; }

 private:
  const Options& options_;
  int device_;
  std::vector<Region> regions_;
  std::vector<size_t> imports_;  // indexes into regions_, in the peer's ticket order
};

/// Logs which GPU each device ordinal names now and which ordinal the current context is
/// on: after a restore with a device map this shows how the driver renumbers (F7).
void LogDeviceIdentity(const char* when) {
  CUdevice current = -1;
  CU(cuCtxGetDevice(&current));
  std::string line;
  for (int ordinal = 0; ordinal < gpu::DeviceCount(); ++ordinal) {
    CUuuid uuid{};
    CU(cuDeviceGetUuid(&uuid, ordinal));
    char text[64];
    std::snprintf(text, sizeof text, " ordinal %d = GPU-%02x%02x%02x%02x", ordinal,
                  static_cast<unsigned char>(uuid.bytes[0]), static_cast<unsigned char>(uuid.bytes[1]),
                  static_cast<unsigned char>(uuid.bytes[2]), static_cast<unsigned char>(uuid.bytes[3]));
    line += text;
  }
  gpu::Log("devices %s: context on ordinal %d;%s", when, static_cast<int>(current), line.c_str());
}

int RunA(const Options& options) {
  gpu::UsePrimaryContext(0);
  Role role(options, 0);
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    role.CreateOwn("a's allocation " + std::to_string(i), options.sizes[i],
                   gpu::PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, 0), 0xA000 + i);
  }
  LogDeviceIdentity("at start");
  role.SendTickets();
  role.ReceiveTickets("b");
  bool ok = role.VerifyRegions(true, "after import");
  ok = gpu::ExpectPeer(options.peer, kSetupDone, kPeerTimeoutMs).index == 1 && ok;
  if (!ok) gpu::Fail("setup: the shared bytes are wrong before any checkpoint");
  gpu::Log("@@READY every allocation shared and checked; waiting for commands on stdin");

  bool all_ok = true;
  std::string line;
  for (uint64_t round = 1; std::getline(std::cin, line); ++round) {
    if (line == "quit") break;
    if (line != "verify") gpu::Fail("unknown command '%s' (verify, quit)", line.c_str());
    gpu::SendPeer(options.peer, gpu::PeerMessage{kVerify, 0, 0, 0, round});
    LogDeviceIdentity("after restore");
    bool round_ok = role.VerifyRegions(false, "after restore");
    round_ok = gpu::ExpectPeer(options.peer, kVerifyDone, kPeerTimeoutMs).index == 1 && round_ok;
    round_ok = role.RewriteOwn(round, true) && round_ok;
    round_ok = role.CheckPeerRewrites() && round_ok;
    gpu::Log("@@ROUND %llu %s", U(round), round_ok ? "PASS" : "FAIL");
    all_ok = all_ok && round_ok;
  }
  gpu::SendPeer(options.peer, gpu::PeerMessage{kQuit, 0, 0, 0, 0});
  role.ReleaseAll();
  gpu::Log("@@DONE %s", all_ok ? "PASS" : "FAIL");
  return all_ok ? 0 : 1;
}

int RunB(const Options& options) {
  if (gpu::DeviceCount() < 2) gpu::Fail("this test needs two GPUs, found %d", gpu::DeviceCount());
  gpu::UsePrimaryContext(1);
  Role role(options, 1);
  role.CreateOwn("b's allocation 0", options.b_bytes, gpu::PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, 1), 0xB000);
  if (options.host_numa_bytes > 0) {
    const int node = gpu::HostNumaNode(1);
    if (node < 0) gpu::Fail("--host-numa-bytes: GPU 1 does not support HOST_NUMA VMM allocations");
    role.CreateOwn("b's allocation 1 (HOST_NUMA)", options.host_numa_bytes,
                   gpu::PosixProp(CU_MEM_LOCATION_TYPE_HOST_NUMA, node), 0xB001);
  }
  LogDeviceIdentity("at start");
  role.ReceiveTickets("a");
  role.SendTickets();
  const bool ok = role.VerifyRegions(true, "after import");
  gpu::SendPeer(options.peer, gpu::PeerMessage{kSetupDone, ok ? 1u : 0u, 0, 0, 0});
  if (!ok) gpu::Fail("setup: the shared bytes are wrong before any checkpoint");

  for (;;) {
    const gpu::PeerMessage m = gpu::RecvPeer(options.peer, kPeerTimeoutMs);
    if (m.type == kQuit) break;
    if (m.type != kVerify) gpu::Fail("unexpected message type %u", m.type);
    LogDeviceIdentity("after restore");
    const bool verified = role.VerifyRegions(false, "after restore");
    gpu::SendPeer(options.peer, gpu::PeerMessage{kVerifyDone, verified ? 1u : 0u, 0, 0, 0});
    role.CheckPeerRewrites();
    role.RewriteOwn(m.value, false);
  }
  role.ReleaseAll();
  gpu::Log("done");
  return 0;
}

std::vector<size_t> ParseSizes(const std::string& text) {
  std::vector<size_t> sizes;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    sizes.push_back(gpu::ParseSize(item.c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return sizes;
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--role" && has_value) {
      options.role = argv[++i];
    } else if (arg == "--peer-fd" && has_value) {
      options.peer = gpu::PeerSocketFromArg(argv[++i]);
    } else if (arg == "--sizes" && has_value) {
      options.sizes = ParseSizes(argv[++i]);
    } else if (arg == "--b-bytes" && has_value) {
      options.b_bytes = gpu::ParseSize(argv[++i]);
    } else if (arg == "--host-numa-bytes" && has_value) {
      options.host_numa_bytes = gpu::ParseSize(argv[++i]);
    } else {
      gpu::Fail("usage: gpu_pair_launcher -- gpu_share_checkpoint [--sizes A,B,C] [--b-bytes N] "
                "[--host-numa-bytes N] (unknown argument '%s')", arg.c_str());
    }
  }
  if ((options.role != "a" && options.role != "b") || options.peer < 0) {
    gpu::Fail("start gpu_share_checkpoint through gpu_pair_launcher (needs --role a|b --peer-fd N)");
  }
  if (options.sizes.empty() || options.b_bytes == 0) gpu::Fail("--sizes and --b-bytes must be non-empty");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  gpu::SetRole(options.role == "a" ? "share A" : "share B");
  gpu::Log("shim %s", gpu::ShimLoaded() ? "loaded" : "not loaded");
  return options.role == "a" ? RunA(options) : RunB(options);
}
