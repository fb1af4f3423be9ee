// gpu_share_ring (GPU): the N-process job that test_share_ring.py checkpoints and
// restores with `cusnap` to see how the phases scale with the number of processes. Started
// by `gpu_pair_launcher --ranks N`, every two ranks joined by a socket pair; rank r runs on
// GPU r % <device count> (2, 4 or 8 processes on however many GPUs the machine has):
//
//   every rank creates --allocations K POSIX-capable allocations of --bytes S on its GPU,
//   fills each with its own pattern, sends a ticket for each to every other rank (one
//   allocation index at a time, so at most N - 1 descriptors per rank are in flight), imports
//   and maps every other rank's at VAs of its own with access for its own GPU, and checks
//   every byte of them. Each rank then maps N * K allocations.
//
// Then rank 0 prints "@@READY" and reads commands from its standard input (the harness):
//   verify  after a restore: every rank checks every byte of every allocation it maps, that
//           each VA still has its address range and (with the shim) its logical handle; a
//           barrier; then sharing: every rank rewrites its own allocations and every other
//           rank checks them through its imports. Rank 0 prints "@@ROUND <n> PASS|FAIL".
//   quit    (or end of input) every rank unmaps and releases everything; rank 0 prints
//           "@@DONE PASS|FAIL".
//
//   gpu_pair_launcher --ranks N -- gpu_share_ring [--allocations 8] [--bytes 2M]
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
  kTicket = 1,       // index = allocation index, bytes, seed; descriptor attached
  kSetupDone = 2,    // rank -> 0: index 1 = every import checked
  kVerify = 3,       // 0 -> rank: value = round
  kVerifyDone = 4,   // rank -> 0: index 1 = every check passed
  kRewriteGo = 5,    // 0 -> rank: everyone verified; rewrite your own allocations
  kRewriteDone = 6,  // rank -> every peer: value = round; my allocations hold their new patterns
  kCheckDone = 7,    // rank -> 0: index 1 = every peer's rewrite read back correctly
  kQuit = 8,
};
constexpr int kPeerTimeoutMs = 600'000;  // ranks wait this long while the harness checkpoints

struct Options {
  int rank = -1;
  int ranks = 0;
  std::vector<int> peers;  // peers[p]: this rank's socket towards rank p (-1 for itself)
  size_t allocations = 8;
  size_t bytes = size_t{2} << 20;
};

// One allocation this rank maps: its own (created here) or an import of a peer's.
struct Region : gpu::Region {
  int creator = -1;  // rank that created it
};

unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }

// The pattern of allocation `index` of `rank` before any rewrite: distinct for every
// allocation of the job.
uint64_t FirstSeed(int rank, size_t index) { return 0x52000000ull + (static_cast<uint64_t>(rank) << 12) + index; }

// The pattern after round `round`'s rewrite (every rank computes its peers' the same way).
uint64_t NextSeed(uint64_t seed, uint64_t round) { return seed * 31 + 0x1000 + round; }

using gpu::LocationOf;

class Rank {
 public:
  Rank(const Options& options, int device) : options_(options), device_(device) {}

  // Creates K allocations on this rank's GPU, maps each for it and fills its pattern.
  void CreateOwn() {
    const CUmemAllocationProp prop = gpu::PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, device_);
    const size_t bytes = gpu::RoundUp(options_.bytes, gpu::Granularity(prop));
    const double start = gpu::NowSeconds();
    for (size_t k = 0; k < options_.allocations; ++k) {
      Region r;
      r.name = "rank " + std::to_string(options_.rank) + "'s allocation " + std::to_string(k);
      r.creator = options_.rank;
      r.bytes = bytes;
      r.handle = gpu::CreateAllocation(bytes, prop);
      r.va = gpu::MapWithAccess(r.handle, bytes, device_);
      r.seed = FirstSeed(options_.rank, k);
      r.location = LocationOf(r.handle);
      if (gpu::ShimLoaded() && !cusnap::shim::IsTagged(r.handle)) {
        gpu::Fail("%s: cuMemCreate returned 0x%llx, not a logical handle", r.name.c_str(), U(r.handle));
      }
      gpu::FillPattern(r.va, r.bytes, r.seed);
      own_.push_back(regions_.size());
      regions_.push_back(r);
    }
    gpu::Log("created %zu allocations of %zu bytes on GPU %d, filled in %.2f s", own_.size(), bytes,
             device_, gpu::NowSeconds() - start);
  }

  // Sends a ticket for own allocation k to every peer, then takes every peer's ticket k,
  // imports and maps it; k by k, so that few descriptors are in flight at once.
  void ExchangeTickets() {
    const size_t n = static_cast<size_t>(options_.ranks);
    imports_.assign(n, {});
    const double start = gpu::NowSeconds();
    for (size_t k = 0; k < own_.size(); ++k) {
      const Region& mine = regions_[own_[k]];
      const int fd = gpu::ExportPosix(mine.handle);
      for (size_t p = 0; p < n; ++p) {
        if (options_.peers[p] < 0) continue;
        gpu::SendPeer(options_.peers[p], gpu::PeerMessage{kTicket, static_cast<uint32_t>(k), mine.bytes, mine.seed, 0}, fd);
      }
      close(fd);
      for (size_t p = 0; p < n; ++p) {
        if (options_.peers[p] < 0) continue;
        int ticket = -1;
        const gpu::PeerMessage m = gpu::ExpectPeer(options_.peers[p], kTicket, kPeerTimeoutMs, &ticket);
        if (ticket < 0 || m.index != k) {
          gpu::Fail("ticket from rank %zu for allocation %u (expected %zu) carried %s", p, m.index, k,
                    ticket < 0 ? "no descriptor" : "the wrong index");
        }
        Region r;
        r.name = "rank " + std::to_string(p) + "'s allocation " + std::to_string(k) + " (import)";
        r.creator = static_cast<int>(p);
        r.handle = gpu::ImportPosix(ticket);
        close(ticket);
        r.bytes = m.bytes;
        r.seed = m.seed;
        r.va = gpu::MapWithAccess(r.handle, r.bytes, device_);
        r.location = LocationOf(r.handle);
        if (gpu::ShimLoaded() && !cusnap::shim::IsTagged(r.handle)) {
          gpu::Fail("%s: the import returned 0x%llx, not a logical handle", r.name.c_str(), U(r.handle));
        }
        imports_[p].push_back(regions_.size());
        regions_.push_back(r);
      }
    }
    gpu::Log("imported and mapped %zu allocations of %d peers in %.2f s", regions_.size() - own_.size(),
             options_.ranks - 1, gpu::NowSeconds() - start);
  }

  // Checks every byte of the regions at `indexes`, that each VA still belongs to a mapping of
  // the same range, and that the application's handle still names an allocation at the
  // same location (logical handles survive checkpoint and restore).
  bool Verify(const std::vector<size_t>& indexes, const char* when) {
    bool ok = true;
    const double start = gpu::NowSeconds();
    size_t bytes = 0;
    for (const size_t i : indexes) {
      ok = gpu::VerifyRegion(regions_[i], when) && ok;
      bytes += regions_[i].bytes;
    }
    gpu::Log("checked %zu allocations, %zu bytes %s in %.2f s: %s", indexes.size(), bytes, when,
             gpu::NowSeconds() - start, ok ? "all correct" : "WRONG");
    return ok;
  }

  std::vector<size_t> AllRegions() const {
    std::vector<size_t> all(regions_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }

  std::vector<size_t> AllImports() const {
    std::vector<size_t> all;
    for (const auto& from_peer : imports_) all.insert(all.end(), from_peer.begin(), from_peer.end());
    return all;
  }

  // Writes round `round`'s pattern into every own allocation and tells every peer.
  void RewriteOwn(uint64_t round) {
    for (const size_t i : own_) {
      Region& r = regions_[i];
      r.seed = NextSeed(r.seed, round);
      gpu::FillPattern(r.va, r.bytes, r.seed);
    }
    for (const int peer : options_.peers) {
      if (peer >= 0) gpu::SendPeer(peer, gpu::PeerMessage{kRewriteDone, 0, 0, 0, round});
    }
  }

  // Waits for every peer's rewrite of round `round` and checks it through the imports.
  bool CheckPeerRewrites(uint64_t round) {
    bool ok = true;
    for (size_t p = 0; p < options_.peers.size(); ++p) {
      if (options_.peers[p] < 0) continue;
      const gpu::PeerMessage m = gpu::ExpectPeer(options_.peers[p], kRewriteDone, kPeerTimeoutMs);
      if (m.value != round) gpu::Fail("rank %zu rewrote for round %llu, expected %llu", p, U(m.value), U(round));
      for (const size_t i : imports_[p]) regions_[i].seed = NextSeed(regions_[i].seed, round);
      ok = Verify(imports_[p], "rewritten by its creator") && ok;
    }
    return ok;
  }

  void ReleaseAll() {
    for (const Region& r : regions_) gpu::ReleaseRegion(r);
    regions_.clear();
    own_.clear();
    imports_.clear();
  }

 private:
  const Options& options_;
  int device_;
  std::vector<Region> regions_;
  std::vector<size_t> own_;                   // indexes into regions_, by allocation index
  std::vector<std::vector<size_t>> imports_;  // imports_[p]: indexes into regions_ of rank p's
};

// Sends `message` to every other rank (rank 0's broadcasts).
void SendAll(const Options& options, const gpu::PeerMessage& message) {
  for (const int peer : options.peers) {
    if (peer >= 0) gpu::SendPeer(peer, message);
  }
}

// Receives one `type` message from every other rank (rank 0's barriers); true when every
// one carried index 1.
bool ExpectAll(const Options& options, uint32_t type) {
  bool ok = true;
  for (const int peer : options.peers) {
    if (peer >= 0) ok = gpu::ExpectPeer(peer, type, kPeerTimeoutMs).index == 1 && ok;
  }
  return ok;
}

int RunFirst(const Options& options, Rank& rank) {
  const bool ok = rank.Verify(rank.AllImports(), "after import") && ExpectAll(options, kSetupDone);
  if (!ok) gpu::Fail("setup: the shared bytes are wrong before any checkpoint");
  gpu::Log("@@READY %d ranks, %zu allocations each, every allocation shared and checked; waiting for commands on stdin",
           options.ranks, options.allocations);

  bool all_ok = true;
  std::string line;
  for (uint64_t round = 1; std::getline(std::cin, line); ++round) {
    if (line == "quit") break;
    if (line != "verify") gpu::Fail("unknown command '%s' (verify, quit)", line.c_str());
    SendAll(options, gpu::PeerMessage{kVerify, 0, 0, 0, round});
    bool round_ok = rank.Verify(rank.AllRegions(), "after restore");
    round_ok = ExpectAll(options, kVerifyDone) && round_ok;
    SendAll(options, gpu::PeerMessage{kRewriteGo, 0, 0, 0, round});
    rank.RewriteOwn(round);
    round_ok = rank.CheckPeerRewrites(round) && round_ok;
    round_ok = ExpectAll(options, kCheckDone) && round_ok;
    gpu::Log("@@ROUND %llu %s", U(round), round_ok ? "PASS" : "FAIL");
    all_ok = all_ok && round_ok;
  }
  SendAll(options, gpu::PeerMessage{kQuit, 0, 0, 0, 0});
  rank.ReleaseAll();
  gpu::Log("@@DONE %s", all_ok ? "PASS" : "FAIL");
  return all_ok ? 0 : 1;
}

int RunOther(const Options& options, Rank& rank) {
  const int first = options.peers[0];
  const bool ok = rank.Verify(rank.AllImports(), "after import");
  gpu::SendPeer(first, gpu::PeerMessage{kSetupDone, ok ? 1u : 0u, 0, 0, 0});
  if (!ok) gpu::Fail("setup: the shared bytes are wrong before any checkpoint");
  for (;;) {
    const gpu::PeerMessage m = gpu::RecvPeer(first, kPeerTimeoutMs);
    if (m.type == kQuit) break;
    if (m.type != kVerify) gpu::Fail("unexpected message type %u from rank 0", m.type);
    const uint64_t round = m.value;
    const bool verified = rank.Verify(rank.AllRegions(), "after restore");
    gpu::SendPeer(first, gpu::PeerMessage{kVerifyDone, verified ? 1u : 0u, 0, 0, round});
    // Nobody may rewrite before every rank has read the old patterns: rank 0's barrier.
    gpu::ExpectPeer(first, kRewriteGo, kPeerTimeoutMs);
    rank.RewriteOwn(round);
    const bool checked = rank.CheckPeerRewrites(round);
    gpu::SendPeer(first, gpu::PeerMessage{kCheckDone, checked ? 1u : 0u, 0, 0, round});
  }
  rank.ReleaseAll();
  gpu::Log("done");
  return 0;
}

std::vector<int> ParsePeers(const std::string& text, int rank) {
  std::vector<int> peers;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const int index = static_cast<int>(peers.size());
    peers.push_back(index == rank ? -1 : gpu::PeerSocketFromArg(item.c_str()));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return peers;
}

Options Parse(int argc, char** argv) {
  Options options;
  std::string peers;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--rank" && has_value) {
      options.rank = std::atoi(argv[++i]);
    } else if (arg == "--ranks" && has_value) {
      options.ranks = std::atoi(argv[++i]);
    } else if (arg == "--peer-fds" && has_value) {
      peers = argv[++i];
    } else if (arg == "--allocations" && has_value) {
      options.allocations = gpu::ParseSize(argv[++i]);
    } else if (arg == "--bytes" && has_value) {
      options.bytes = gpu::ParseSize(argv[++i]);
    } else {
      gpu::Fail("usage: gpu_pair_launcher --ranks N -- gpu_share_ring [--allocations K] [--bytes S] "
                "(unknown argument '%s')", arg.c_str());
    }
  }
  if (options.ranks < 2 || options.rank < 0 || options.rank >= options.ranks || peers.empty()) {
    gpu::Fail("start gpu_share_ring through gpu_pair_launcher --ranks N (needs --rank r --ranks N --peer-fds ...)");
  }
  options.peers = ParsePeers(peers, options.rank);
  if (options.peers.size() != static_cast<size_t>(options.ranks)) {
    gpu::Fail("--peer-fds names %zu ranks, --ranks says %d", options.peers.size(), options.ranks);
  }
  if (options.allocations == 0 || options.bytes == 0 || options.bytes % 8 != 0) {
    gpu::Fail("--allocations must be positive and --bytes a positive multiple of 8");
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  gpu::SetRole("ring " + std::to_string(options.rank));
  const int devices = gpu::DeviceCount();
  if (devices < 1) gpu::Fail("no CUDA device");
  const int device = options.rank % devices;
  gpu::Log("shim %s; rank %d of %d on GPU %d of %d", gpu::ShimLoaded() ? "loaded" : "not loaded", options.rank,
           options.ranks, device, devices);
  gpu::UsePrimaryContext(device);
  Rank rank(options, device);
  rank.CreateOwn();
  rank.ExchangeTickets();
  return options.rank == 0 ? RunFirst(options, rank) : RunOther(options, rank);
}
