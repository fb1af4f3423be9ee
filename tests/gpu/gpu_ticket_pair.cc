// gpu_ticket_pair (GPU): the two-process ticket test with real bytes on two GPUs.
// Started by gpu_pair_launcher, which runs role a and role b joined by a socket pair.
//
//   role a (GPU 0): creates a POSIX-capable allocation, fills its first half with pattern A,
//     exports it (with the shim: a cusnap ticket) and sends the descriptor to b (SCM_RIGHTS);
//     then checks that the second half holds b's pattern.
//   role b (GPU 1): imports, maps at its own VA, grants itself access, checks every byte of
//     a's half, writes pattern B into the second half.
//
// With --expect shim (run under `cusnap run`) it also asserts what the shim promises: the
// descriptor b receives is a ticket naming a's pid, never the raw CUDA descriptor; the
// handle b gets is a logical handle (top 16 bits = the shim's tag); and the import leaves
// no new descriptor in b's table except the driver's own /dev/nvidia* ones. --expect plain
// (no shim) runs the same exchange on the bare driver, as the baseline.
//
//   gpu_pair_launcher -- gpu_ticket_pair [--bytes 256M] [--expect shim|plain]
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "common/ticket.h"
#include "gpu/gpu_check.h"
#include "gpu/gpu_pattern.h"
#include "gpu/gpu_peer.h"
#include "gpu/gpu_vmm.h"
#include "shim/tables/handles.h"

namespace {

enum : uint32_t { kTicketMessage = 1, kWrittenMessage = 2, kFinishMessage = 3 };
constexpr uint64_t kSeedA = 0xA11CE0001ull;
constexpr uint64_t kSeedB = 0xB0B000002ull;
constexpr int kPeerTimeoutMs = 120'000;

struct Options {
  std::string role;
  int peer = -1;
  size_t bytes = size_t{256} << 20;
  bool expect_shim = true;
};

void CheckShimPresence(const Options& options) {
  const bool loaded = gpu::ShimLoaded();
  gpu::Log("shim %s (expected %s)", loaded ? "loaded" : "not loaded",
           options.expect_shim ? "loaded" : "not loaded");
  if (loaded != options.expect_shim) gpu::Fail("the shim's presence is not what --expect says");
}

int RoleA(const Options& options) {
  gpu::UsePrimaryContext(0);
  const size_t bytes = gpu::RoundUp(options.bytes, gpu::Granularity(0));
  const size_t half = bytes / 2;
  const CUmemGenericAllocationHandle handle = gpu::CreatePosixAllocation(bytes, 0);
  const CUdeviceptr va = gpu::MapWithAccess(handle, bytes, 0);
  gpu::Log("created %zu bytes on GPU 0, handle 0x%llx, mapped at VA 0x%llx", bytes,
           static_cast<unsigned long long>(handle), static_cast<unsigned long long>(va));
  if (options.expect_shim && !cusnap::shim::IsTagged(handle)) {
    gpu::Fail("cuMemCreate of a POSIX-capable allocation returned 0x%llx, not a logical handle",
              static_cast<unsigned long long>(handle));
  }
  gpu::FillPattern(va, half, kSeedA);

  const int fd = gpu::ExportPosix(handle);
  gpu::Log("exported: descriptor %d -> %s", fd, gpu::DescriptorTarget(fd).c_str());
  gpu::PeerMessage ticket{kTicketMessage, 0, bytes, kSeedA, static_cast<uint64_t>(getpid())};
  gpu::SendPeer(options.peer, ticket, fd);
  close(fd);

  const gpu::PeerMessage written = gpu::ExpectPeer(options.peer, kWrittenMessage, kPeerTimeoutMs);
  bool ok = gpu::VerifyPattern(va, half, kSeedA, "own half (pattern A) after b's import");
  ok = gpu::VerifyPattern(va + half, bytes - half, written.seed, "second half written by b") && ok;
  gpu::SendPeer(options.peer, gpu::PeerMessage{kFinishMessage, ok ? 1u : 0u, 0, 0, 0});

  gpu::UnmapAndFree(va, bytes);
  CU(cuMemRelease(handle));
  if (!ok) gpu::Fail("role a saw wrong bytes");
  gpu::Log("PASS: b read every byte of a's half on GPU %d; a read every byte b wrote", 1);
  return 0;
}

// Makes the shim and the driver open whatever they open lazily (contexts, the shim's
// endpoint, its ticket machinery, peer mappings from this GPU to GPU 0) before the
// descriptor table is compared around the import.
void WarmUp(int device) {
  CUdeviceptr scratch = 0;
  CU(cuMemAlloc(&scratch, size_t{2} << 20));
  CU(cuMemFree(scratch));
  const size_t granularity = gpu::Granularity(device);
  const CUmemGenericAllocationHandle own = gpu::CreatePosixAllocation(granularity, device);
  const int fd = gpu::ExportPosix(own);
  close(fd);
  CU(cuMemRelease(own));
  // A private (untracked) allocation on GPU 0, mapped for this GPU and read once.
  CUmemAllocationProp prop = gpu::PosixProp(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  const size_t peer_bytes = gpu::Granularity(prop);
  const CUmemGenericAllocationHandle peer = gpu::CreateAllocation(peer_bytes, prop);
  const CUdeviceptr va = gpu::MapWithAccess(peer, peer_bytes, device);
  CU(cuMemsetD8(va, 0x11, peer_bytes));
  uint64_t word = 0;
  CU(cuMemcpyDtoH(&word, va, sizeof word));
  gpu::UnmapAndFree(va, peer_bytes);
  CU(cuMemRelease(peer));
}

void CheckTicket(const Options& options, int fd, uint64_t creator_pid) {
  const std::string target = gpu::DescriptorTarget(fd);
  gpu::Log("received descriptor %d -> %s", fd, target.c_str());
  if (!options.expect_shim) return;
  auto ticket = cusnap::ReadTicket(fd);
  if (!ticket.ok()) gpu::Fail("reading the received descriptor as a ticket: %s", ticket.error().message.c_str());
  if (!ticket.value().has_value()) {
    gpu::Fail("the descriptor b received (%s) is not a cusnap ticket: the raw CUDA descriptor left a",
              target.c_str());
  }
  const cusnap::Ticket& t = *ticket.value();
  gpu::Log("it is a cusnap ticket: creator pid %d, start %llu, allocation %llu", t.id.creator_pid,
           static_cast<unsigned long long>(t.id.creator_start),
           static_cast<unsigned long long>(t.id.local_id));
  if (static_cast<uint64_t>(t.id.creator_pid) != creator_pid) {
    gpu::Fail("the ticket names creator pid %d, but a is pid %llu", t.id.creator_pid,
              static_cast<unsigned long long>(creator_pid));
  }
}

// Every descriptor the import added must be one of the driver's device files.
void CheckNewDescriptors(const Options& options, const std::map<int, std::string>& before,
                         const std::map<int, std::string>& after) {
  int added = 0;
  int foreign = 0;
  for (const auto& [fd, target] : after) {
    const auto old = before.find(fd);
    if (old != before.end() && old->second == target) continue;
    ++added;
    const bool driver_file = target.rfind("/dev/nvidia", 0) == 0;
    gpu::Log("new descriptor after import: %d -> %s%s", fd, target.c_str(),
             driver_file ? " (driver device file: allowed)" : "");
    if (!driver_file) ++foreign;
  }
  gpu::Log("descriptor table: %zu before the import, %zu after (ticket closed); %d new, %d not "
           "a /dev/nvidia* file", before.size(), after.size(), added, foreign);
  if (options.expect_shim && foreign != 0) {
    gpu::Fail("the import left %d descriptor(s) in b's table that are not driver device files",
              foreign);
  }
}

int RoleB(const Options& options) {
  const int device = gpu::DeviceCount() > 1 ? 1 : 0;
  gpu::UsePrimaryContext(device);
  gpu::Log("using GPU %d of %d", device, gpu::DeviceCount());
  if (gpu::DeviceCount() < 2) gpu::Fail("this test needs two GPUs, found %d", gpu::DeviceCount());
  WarmUp(device);

  int fd = -1;
  const gpu::PeerMessage ticket = gpu::ExpectPeer(options.peer, kTicketMessage, kPeerTimeoutMs, &fd);
  if (fd < 0) gpu::Fail("a's ticket message carried no descriptor");
  CheckTicket(options, fd, ticket.value);
  const std::map<int, std::string> before = gpu::DescriptorTable();

  const CUmemGenericAllocationHandle handle = gpu::ImportPosix(fd);
  gpu::Log("imported: handle 0x%llx (top 16 bits 0x%04llx; the shim's tag is 0x%04llx)",
           static_cast<unsigned long long>(handle), static_cast<unsigned long long>(handle >> 48),
           static_cast<unsigned long long>(cusnap::shim::kLogicalTag >> 48));
  if (options.expect_shim && !cusnap::shim::IsTagged(handle)) {
    gpu::Fail("the imported handle 0x%llx is not a logical handle", static_cast<unsigned long long>(handle));
  }
  CUmemAllocationProp prop{};
  CU(cuMemGetAllocationPropertiesFromHandle(&prop, handle));
  gpu::Log("imported allocation lives on location type %d id %d", static_cast<int>(prop.location.type),
           prop.location.id);
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != 0) {
    gpu::Fail("the imported allocation should be device memory of GPU 0");
  }
  const size_t bytes = ticket.bytes;
  const size_t half = bytes / 2;
  const CUdeviceptr va = gpu::MapWithAccess(handle, bytes, device);
  gpu::Log("mapped %zu bytes at VA 0x%llx with read-write access for GPU %d", bytes,
           static_cast<unsigned long long>(va), device);
  close(fd);
  CheckNewDescriptors(options, before, gpu::DescriptorTable());

  if (!gpu::VerifyPattern(va, half, ticket.seed, "a's half read by b")) gpu::Fail("b saw wrong bytes");
  gpu::FillPattern(va + half, bytes - half, kSeedB);
  gpu::SendPeer(options.peer, gpu::PeerMessage{kWrittenMessage, 0, bytes - half, kSeedB, 0});
  const gpu::PeerMessage finish = gpu::ExpectPeer(options.peer, kFinishMessage, kPeerTimeoutMs);

  gpu::UnmapAndFree(va, bytes);
  CU(cuMemRelease(handle));
  if (finish.index != 1) gpu::Fail("a reported wrong bytes");
  gpu::Log("PASS");
  return 0;
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
    } else if (arg == "--bytes" && has_value) {
      options.bytes = gpu::ParseSize(argv[++i]);
    } else if (arg == "--expect" && has_value) {
      const std::string expect = argv[++i];
      if (expect != "shim" && expect != "plain") gpu::Fail("--expect takes shim or plain");
      options.expect_shim = expect == "shim";
    } else {
      gpu::Fail("usage: gpu_pair_launcher -- gpu_ticket_pair [--bytes N] [--expect shim|plain] "
                "(unknown argument '%s')", arg.c_str());
    }
  }
  if ((options.role != "a" && options.role != "b") || options.peer < 0) {
    gpu::Fail("start gpu_ticket_pair through gpu_pair_launcher (needs --role a|b --peer-fd N)");
  }
  if (options.bytes < (size_t{4} << 20)) gpu::Fail("--bytes must be at least 4 MiB");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  gpu::SetRole(options.role == "a" ? "ticket A" : "ticket B");
  CheckShimPresence(options);
  return options.role == "a" ? RoleA(options) : RoleB(options);
}
