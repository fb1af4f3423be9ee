// The job of the images tests (cli_images_test.cc, and the fault matrix's dump and images-
// restore cases, tests/faults/): two processes that share GPU memory and talk to nothing
// outside their own tree, so that CRIU can take the tree to disk and bring it back
// (`cusnap dump` / `cusnap restore --images-dir`). Started as
//
//   cusnap run -- criu_job <dir> <MiB> [<rounds>]
//
// The root forks a child before any CUDA call (each gets its own cusnap endpoint); each prints
// "PID <role> <pid>" (a test that kills one needs the child's pid). The root creates a
// POSIX-capable allocation (1) of <MiB> on device 0, writes a pattern into it and sends the
// ticket to the child over a socketpair (SCM_RIGHTS, common/socket.h); the child imports it
// and maps it on device 1, and creates a private allocation (2) of its own with another
// pattern. Both print "READY <role>" on stdout (a file) and wait for <dir>/go. Then each checks
// every byte it can see (the child its own allocation first, then the shared one; the root the
// shared one), printing "LOST <role> <allocation> <why>" for each allocation that does not
// read back, then "CHECKED <role> <bytes checked>" (what a process whose peer was killed can
// still show); once the root has checked, the child writes a word into the shared allocation
// and the root reads it back through its own mapping (the sharing is live again), and both print
// "PASS <role> <bytes checked>" or "FAIL <role> <why>". The root exits 0 when both passed.
// With <rounds> N > 1 (a job taken through several restores) it checks N times, round k
// once <dir>/go-<k> exists, each PASS line ending in " round <k>"; the word the child wrote
// is put back after each round, so that the next one finds every byte as made.
//
// With CRIU_JOB_UNTRACKED=1 the child also holds an untracked import (a job cusnap refuses to
// checkpoint): a process of its own without the shim (criu_job --raw-export, LD_PRELOAD
// dropped) creates an allocation (3) of <MiB> on device 1 with a third pattern and sends its
// raw descriptor, not a cusnap ticket; the child imports and maps it, the exporter exits, and
// the child checks those bytes too.
#include <cuda.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/socket.h"
#include "simcuda/introspection.h"

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

/// The 32-bit word `i` of allocation `which`: differs per word and per allocation.
uint32_t Pattern(int which, uint64_t i) {
  return static_cast<uint32_t>((i + 1) * 2654435761u) ^ static_cast<uint32_t>(which * 0x9E3779B9u);
}

std::string role;  // "root" or "child", for every line printed

[[noreturn]] void Fail(const std::string& why) {
  std::printf("FAIL %s %s\n", role.c_str(), why.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

void Check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) Fail(std::string(what) + " failed: " + std::to_string(rc));
}

/// A fresh allocation of `bytes` on `device` (POSIX-capable when `shareable`).
void Create(int device, uint64_t bytes, bool shareable, CUmemGenericAllocationHandle* out) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  prop.requestedHandleTypes = shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  Check(cuMemCreate(out, bytes, &prop, 0), "cuMemCreate");
}

/// `handle` mapped read-write for `device` at a fresh VA.
CUdeviceptr Map(CUmemGenericAllocationHandle handle, uint64_t bytes, int device) {
  CUdeviceptr va = 0;
  Check(cuMemAddressReserve(&va, bytes, 0, 0, 0), "cuMemAddressReserve");
  Check(cuMemMap(va, bytes, 0, handle, 0), "cuMemMap");
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  Check(cuMemSetAccess(va, bytes, &access, 1), "cuMemSetAccess");
  return va;
}

void Fill(CUdeviceptr va, uint64_t bytes, int which) {
  std::vector<uint32_t> host(bytes / 4);
  for (uint64_t i = 0; i < host.size(); ++i) host[i] = Pattern(which, i);
  Check(cuMemcpyHtoD(va, host.data(), bytes), "cuMemcpyHtoD");
}

/// Why the `bytes` at `va` do not all hold allocation `which`'s pattern (the first wrong word,
/// or the copy's error); "" when they do.
std::string Unlike(CUdeviceptr va, uint64_t bytes, int which) {
  std::vector<uint32_t> host(bytes / 4);
  if (const CUresult rc = cuMemcpyDtoH(host.data(), va, bytes); rc != CUDA_SUCCESS) {
    return "cuMemcpyDtoH failed: " + std::to_string(rc);
  }
  for (uint64_t i = 0; i < host.size(); ++i) {
    if (host[i] != Pattern(which, i)) {
      return "word " + std::to_string(i) + " holds " + std::to_string(host[i]) + ", expected " +
             std::to_string(Pattern(which, i));
    }
  }
  return "";
}

/// Reads `expected` from the peer on `sock`, or Fails naming why not (a peer that died).
void Await(int sock, char expected) {
  char got = 0;
  ssize_t n = -1;
  while ((n = ::read(sock, &got, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1 || got != expected) {
    Fail(std::string("the peer did not say '") + expected + "' (" +
         (n < 0 ? std::strerror(errno) : n == 0 ? "end of stream" : "said '" + std::string(1, got) + "'") + ")");
  }
}

/// CRIU_JOB_FAULT="<role>:<entry point>:<nth>:<CUresult>" (the fault matrix): in the process
/// of that role, the nth call of the entry point, counted from its start, fails with that
/// result. Armed right after the fork, before this process's first driver call; SIMCUDA_FAULTS
/// cannot say which process, and both share the environment.
void ArmFault() {
  const char* spec = std::getenv("CRIU_JOB_FAULT");
  if (spec == nullptr) return;
  std::vector<std::string> f;
  std::string part;
  for (const char* c = spec;; ++c) {
    if (*c == ':' || *c == '\0') {
      f.push_back(part);
      part.clear();
      if (*c == '\0') break;
    } else {
      part += *c;
    }
  }
  if (f.size() != 4) Fail(std::string("malformed CRIU_JOB_FAULT: ") + spec);
  if (f[0] != role) return;
  simcuda_test_inject_fault(f[1].c_str(), static_cast<unsigned>(std::stoul(f[2])), std::stoi(f[3]));
}

void WaitForGo(const std::string& dir, int round, int rounds) {
  const std::string go = dir + (rounds > 1 ? "/go-" + std::to_string(round) : "/go");
  while (::access(go.c_str(), F_OK) != 0) ::usleep(20000);
}

CUcontext Start(int device) {
  Check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  Check(cuDeviceGet(&dev, device), "cuDeviceGet");
  CUcontext ctx = nullptr;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

/// criu_job --raw-export <socket fd> <MiB>: allocation (3), filled, exported as the driver's
/// own descriptor (no shim here) to the peer on `sock`; returns once the peer imported it.
int RawExport(int sock, uint64_t bytes) {
  role = "raw";
  Start(1);
  CUmemGenericAllocationHandle handle = 0;
  Create(1, bytes, true, &handle);
  Fill(Map(handle, bytes, 1), bytes, 3);
  int fd = -1;
  Check(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "cuMemExportToShareableHandle");
  const char tag = 'r';
  if (!cusnap::SendPacket(sock, &tag, 1, fd, cusnap::Deadline::AfterMs(10000)).ok()) {
    Fail("cannot send the descriptor");
  }
  Await(sock, 'k');
  return 0;
}

/// The child's untracked import (CRIU_JOB_UNTRACKED): allocation (3) from criu_job
/// --raw-export, mapped on device 1; its VA.
CUdeviceptr ImportUntracked(uint64_t bytes) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) Fail("socketpair failed");
  const pid_t exporter = ::fork();
  if (exporter < 0) Fail("fork failed");
  if (exporter == 0) {
    ::close(pair[0]);
    ::unsetenv("LD_PRELOAD");
    const std::string fd = std::to_string(pair[1]), mib = std::to_string(bytes / kMiB);
    ::execl("/proc/self/exe", "criu_job", "--raw-export", fd.c_str(), mib.c_str(),
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(pair[1]);
  char tag = 0;
  int fd = -1;
  if (!cusnap::RecvPacket(pair[0], &tag, 1, &fd, cusnap::Deadline::AfterMs(10000)).ok() || fd < 0) {
    Fail("no descriptor from the raw exporter");
  }
  CUmemGenericAllocationHandle handle = 0;
  Check(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "cuMemImportFromShareableHandle (untracked)");
  ::close(fd);
  const CUdeviceptr va = Map(handle, bytes, 1);
  if (::write(pair[0], "k", 1) != 1) Fail("cannot tell the raw exporter");
  int status = 0;
  ::waitpid(exporter, &status, 0);
  ::close(pair[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Fail("the raw exporter failed");
  return va;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--raw-export") {
    return RawExport(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10) * kMiB);
  }
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: criu_job <dir> <MiB> [<rounds>]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int rounds = argc == 4 ? std::max(1, std::atoi(argv[3])) : 1;
  const uint64_t bytes = std::strtoull(argv[2], nullptr, 10) * kMiB;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  role = child == 0 ? "child" : "root";
  // A peer that died (the fault matrix kills one) must end in a FAIL line, not SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  std::printf("PID %s %d\n", role.c_str(), static_cast<int>(::getpid()));
  std::fflush(stdout);
  ArmFault();
  const int sock = pair[child == 0 ? 1 : 0];
  ::close(pair[child == 0 ? 0 : 1]);
  const int device = child == 0 ? 1 : 0;
  Start(device);
  CUmemGenericAllocationHandle shared = 0, own = 0;
  CUdeviceptr shared_va = 0, own_va = 0, untracked_va = 0;
  if (child != 0) {
    Create(device, bytes, true, &shared);
    shared_va = Map(shared, bytes, device);
    Fill(shared_va, bytes, 1);
    int ticket = -1;
    Check(cuMemExportToShareableHandle(&ticket, shared, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
          "cuMemExportToShareableHandle");
    const char tag = 't';
    if (!cusnap::SendPacket(sock, &tag, 1, ticket, cusnap::Deadline::AfterMs(10000)).ok()) {
      Fail("cannot send the ticket");
    }
    ::close(ticket);
  } else {
    char tag = 0;
    int ticket = -1;
    if (!cusnap::RecvPacket(sock, &tag, 1, &ticket, cusnap::Deadline::AfterMs(10000)).ok() ||
        ticket < 0) {
      Fail("no ticket from the root");
    }
    Check(cuMemImportFromShareableHandle(&shared, reinterpret_cast<void*>(static_cast<intptr_t>(ticket)),
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle");
    ::close(ticket);
    shared_va = Map(shared, bytes, device);
    Create(device, bytes, false, &own);
    own_va = Map(own, bytes, device);
    Fill(own_va, bytes, 2);
    if (std::getenv("CRIU_JOB_UNTRACKED") != nullptr) untracked_va = ImportUntracked(bytes);
  }
  std::printf("READY %s\n", role.c_str());
  std::fflush(stdout);
  for (int round = 1; round <= rounds; ++round) {
    WaitForGo(dir, round, rounds);
    // After the restore: every byte (each allocation on its own: a lost one does not hide the
    // others), then a write by the child seen by the root.
    const uint64_t poke_word = 1024;
    const uint32_t poke = 0xC0FFEE42u;
    uint64_t checked = 0;
    int lost = 0;
    const auto check = [&](CUdeviceptr va, int which) {
      if (const std::string why = Unlike(va, bytes, which); !why.empty()) {
        std::printf("LOST %s %d %s\n", role.c_str(), which, why.c_str());
        ++lost;
      } else {
        checked += bytes;
      }
    };
    if (child == 0) check(own_va, 2);
    if (untracked_va != 0) check(untracked_va, 3);
    check(shared_va, 1);
    if (lost > 0) Fail(std::to_string(lost) + " allocation(s) lost");
    std::printf("CHECKED %s %llu\n", role.c_str(), static_cast<unsigned long long>(checked));
    std::fflush(stdout);
    // The root has checked the shared bytes before the child writes into them ("c"), and the
    // child has written before the root reads its word ("p").
    if (child == 0) {
      Await(sock, 'c');
      Check(cuMemcpyHtoD(shared_va + poke_word * 4, &poke, 4), "cuMemcpyHtoD (poke)");
      if (::write(sock, "p", 1) != 1) Fail("cannot tell the root");
    } else {
      if (::write(sock, "c", 1) != 1) Fail("cannot tell the child");
      Await(sock, 'p');
      uint32_t seen = 0;
      Check(cuMemcpyDtoH(&seen, shared_va + poke_word * 4, 4), "cuMemcpyDtoH (poke)");
      if (seen != poke) Fail("the child's write is not seen: " + std::to_string(seen));
      if (rounds > 1) {  // the word back as made, before the child goes on ("b")
        const uint32_t made = Pattern(1, poke_word);
        Check(cuMemcpyHtoD(shared_va + poke_word * 4, &made, 4), "cuMemcpyHtoD (put back)");
        if (::write(sock, "b", 1) != 1) Fail("cannot tell the child");
      }
    }
    if (child == 0 && rounds > 1) Await(sock, 'b');
    const std::string which = rounds > 1 ? " round " + std::to_string(round) : "";
    std::printf("PASS %s %llu%s\n", role.c_str(), static_cast<unsigned long long>(checked),
                which.c_str());
    std::fflush(stdout);
  }
  if (child == 0) return 0;
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
