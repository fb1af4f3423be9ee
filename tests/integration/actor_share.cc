// Actor program for the sharing tests (sharing_multiprocess_test.cc). Runs one role on the
// simulated driver with the shim preloaded; descriptor 3 is its channel (see
// sharing_actor.h). Roles:
//   creator <scm|pidfd|spawn>   creates, writes, exports a ticket and hands it over
//   importer <scm|pidfd|spawn FD> imports the ticket, reads the creator's bytes, writes its own
//   mutual                      creates + exports, then imports the peer's allocation while
//                               another thread sits in a long driver call
//   basics                      argument checks, untracked allocations and imports, many
//                               tracked allocations (the test inspects it over its endpoint)
//   raw-exporter                (run without the shim) exports a raw descriptor
//   fork-early / fork-late      fork before any CUDA use / after tracking
//   fork-quiesced               fork while its own shim is quiesced
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/ticket.h"
#include "sharing_actor.h"

using namespace actor;

namespace {

constexpr uint32_t kCreatorSeed = 11;
constexpr uint32_t kImporterSeed = 29;

// Starts this program again as `args`, with `channel` as its descriptor 3 and `inherit`
// (when >= 0) left open across exec at the same number. `with_shim` false drops LD_PRELOAD.
pid_t Respawn(const std::vector<std::string>& args, int channel, int inherit, bool with_shim) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!with_shim && std::strncmp(*e, "LD_PRELOAD=", 11) == 0) continue;
    env.emplace_back(*e);
  }
  std::vector<char*> argv, envp;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    dup2(channel, kChannel);
    fcntl(kChannel, F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
    if (inherit >= 0) fcntl(inherit, F_SETFD, 0);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A ticket made by this process for its own allocation.
void CheckOwnTicket(int fd) {
  auto t = cusnap::ReadTicket(fd);
  Check(t.ok() && t->has_value(), "export returned something that is not a ticket");
  Check((*t)->id.creator_pid == getpid(), "ticket names pid " + std::to_string((*t)->id.creator_pid));
}

// kIdentify on `pid`'s endpoint; fails the actor when it does not answer.
cusnap::proto::IdentifyReply Identify(int pid) {
  auto reply = cusnap::Request<cusnap::proto::IdentifyReply>(
      cusnap::EndpointPath(cusnap::ControlDir(), pid), cusnap::proto::IdentifyRequest{}.Encode(),
      kTimeoutMs);
  if (!reply.ok()) Fail("identify pid " + std::to_string(pid) + ": " + reply.error().message);
  return *reply;
}

// Lifecycle step `op` on `pid`'s endpoint (kQuiesce waits `drain_ms` for calls in flight);
// the step's error, whole, when it was refused.
cusnap::Result<cusnap::proto::StepReply> Step(int pid, cusnap::proto::Op op, uint64_t drain_ms = 0) {
  return cusnap::Request<cusnap::proto::StepReply>(cusnap::EndpointPath(cusnap::ControlDir(), pid),
                                                   cusnap::proto::StepRequest{op, drain_ms, ""}.Encode(),
                                                   kTimeoutMs, op);
}

bool EndpointExists(int pid) {
  struct stat st;
  return stat(cusnap::EndpointPath(cusnap::ControlDir(), pid).c_str(), &st) == 0;
}

// ---- creator / importer ----------------------------------------------------------------

int Creator(const std::string& transport) {
  Init();
  const size_t size = 2 * Granularity();
  CUmemAllocationProp prop = Prop(true);
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemCreate(&handle, size, &prop, 0));
  Check(IsLogical(handle), "a POSIX-capable allocation is tracked (logical handle)");
  const CUdeviceptr va = MapNew(handle, size);
  WritePattern(va, 0, size, kCreatorSeed);
  int ticket = -1;
  CU(cuMemExportToShareableHandle(&ticket, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CheckOwnTicket(ticket);

  int channel = kChannel;
  pid_t importer = -1;
  if (transport == "scm") {
    Send(channel, "ticket", ticket);
  } else if (transport == "pidfd") {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // where Yama restricts pidfd_getfd
    Send(channel, "ticket " + std::to_string(getpid()) + " " + std::to_string(ticket));
  } else {  // spawn: the importer is our child and inherits the ticket across fork + exec
    int pair[2];
    Check(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0, "socketpair");
    importer = Respawn({"importer", "spawn", std::to_string(ticket)}, pair[1], ticket, true);
    close(pair[1]);
    channel = pair[0];
  }
  Expect(channel, "written");
  // The importer wrote the second half; the first half is still ours.
  CheckPattern(va, 0, size / 2, kCreatorSeed);
  CheckPattern(va, size / 2, size / 2, kImporterSeed);
  Send(channel, "verified");
  if (importer > 0) Check(WaitExit(importer) == 0, "importer child failed");
  Unmap(va, size);
  CU(cuMemRelease(handle));
  close(ticket);
  return 0;
}

int Importer(const std::string& transport, const char* fd_arg) {
  Init();
  int ticket = -1;
  if (transport == "scm") {
    ticket = Expect(kChannel, "ticket").fd;
  } else if (transport == "pidfd") {
    Msg m = Expect(kChannel, "ticket ");
    int pid = 0, remote_fd = 0;
    Check(std::sscanf(m.text.c_str(), "ticket %d %d", &pid, &remote_fd) == 2, "ticket message");
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    Check(pidfd >= 0, "pidfd_open: " + std::string(std::strerror(errno)));
    ticket = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, remote_fd, 0));
    Check(ticket >= 0, "pidfd_getfd: " + std::string(std::strerror(errno)));
    close(pidfd);
  } else {
    ticket = std::atoi(fd_arg);
  }
  Check(ticket >= 0, "no ticket descriptor");
  Check(CountRawDescriptors() == 0, "the importer holds a raw descriptor before importing");
  auto given = cusnap::ReadTicket(ticket);
  Check(given.ok() && given->has_value(), "the creator's ticket reads back");
  const cusnap::Ticket real_ticket = **given;

  // Tickets are capabilities: the creator's id with any other capability (a
  // guess, or one bit off) gets nothing, through a forged ticket or a bare kExport request.
  {
    cusnap::Ticket guessed = real_ticket;
    guessed.capability.word[0] ^= 1;
    auto forged = cusnap::CreateTicket(guessed);
    Check(forged.ok(), "CreateTicket");
    CUmemGenericAllocationHandle h = 0;
    CU_EXPECT(CUDA_ERROR_INVALID_HANDLE,
              cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(*forged)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(*forged);
    auto asked = cusnap::RequestExport(real_ticket.id, 1, cusnap::proto::Capability{{1, 1}}, kTimeoutMs);
    Check(!asked.ok() && asked.error().code == CUDA_ERROR_INVALID_HANDLE &&
              asked.error().message.find("does not carry its ticket's capability") != std::string::npos,
          "a guessed capability is refused by the creator");
    Check(CountRawDescriptors() == 0, "a refused request left a raw descriptor");
  }

  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(ticket)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  Check(IsLogical(handle), "a ticket import gives a logical handle");
  Check(CountRawDescriptors() == 0, "the raw CUDA descriptor stayed in the importer's fd table");
  Check(fcntl(ticket, F_GETFD) >= 0, "the shim closed the application's ticket");
  // A second import aliases the same allocation under another logical handle.
  CUmemGenericAllocationHandle again = 0;
  CU(cuMemImportFromShareableHandle(&again, reinterpret_cast<void*>(static_cast<intptr_t>(ticket)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  Check(IsLogical(again) && again != handle, "a repeated import gives a new logical handle");

  CUmemAllocationProp prop{};
  CU(cuMemGetAllocationPropertiesFromHandle(&prop, handle));
  Check(prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "imported properties");
  const size_t size = 2 * Granularity();
  const CUdeviceptr va = MapNew(again, size);
  CheckPattern(va, 0, size, kCreatorSeed);
  WritePattern(va, size / 2, size / 2, kImporterSeed);
  // Re-exporting the import gives a ticket naming the original creator, not this process.
  int reexport = -1;
  CU(cuMemExportToShareableHandle(&reexport, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  auto t = cusnap::ReadTicket(reexport);
  Check(t.ok() && t->has_value(), "re-export gives a ticket");
  Check((*t)->id.creator_pid != getpid(), "a re-exported ticket names the original creator");
  Check(cusnap::SameCapability((*t)->capability, real_ticket.capability),
        "a re-exported ticket carries the creator's capability on");
  if (transport == "spawn") Check((*t)->id.creator_pid == getppid(), "creator is our parent");
  close(reexport);

  Send(kChannel, "written");
  Expect(kChannel, "verified");
  CU(cuMemRelease(handle));
  CU(cuMemRelease(again));
  Unmap(va, size);
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRelease(handle));  // gone: the driver's answer
  close(ticket);
  return 0;
}

// ---- mutual import under a long call -----------------------------------------------------

// Waits until thread `tid` sleeps (inside the delayed driver call), at most 30 s.
void WaitSleeping(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  for (int i = 0; i < 3000; ++i) {
    char buf[512] = {};
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    const char* close_paren = n > 0 ? std::strrchr(buf, ')') : nullptr;
    if (close_paren != nullptr && close_paren[1] == ' ' && close_paren[2] == 'S') return;
    usleep(10'000);
  }
  Fail("the long-call thread never blocked");
}

std::atomic<bool> g_long_call_done{false};
std::atomic<pid_t> g_long_call_tid{0};

int Mutual() {
  const CUcontext ctx = Init();
  const size_t size = Granularity();
  const uint32_t seed = static_cast<uint32_t>(getpid());
  CUmemAllocationProp prop = Prop(true);
  CUmemGenericAllocationHandle mine = 0;
  CU(cuMemCreate(&mine, size, &prop, 0));
  const CUdeviceptr my_va = MapNew(mine, size);
  WritePattern(my_va, 0, size, seed);
  int ticket = -1;
  CU(cuMemExportToShareableHandle(&ticket, mine, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

  // An application thread sits in a long driver call (SIMCUDA_DELAYS makes it long).
  std::thread([ctx] {
    cuCtxSetCurrent(ctx);
    g_long_call_tid = static_cast<pid_t>(syscall(SYS_gettid));
    cuCtxSynchronize();
    g_long_call_done = true;
  }).detach();
  while (g_long_call_tid.load() == 0) usleep(1000);
  WaitSleeping(g_long_call_tid.load());

  Send(kChannel, "ticket " + std::to_string(seed), ticket);
  Msg peer = Expect(kChannel, "ticket ");
  const uint32_t peer_seed = static_cast<uint32_t>(std::strtoul(peer.text.c_str() + 7, nullptr, 10));
  CUmemGenericAllocationHandle theirs = 0;
  CU(cuMemImportFromShareableHandle(&theirs, reinterpret_cast<void*>(static_cast<intptr_t>(peer.fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  const CUdeviceptr their_va = MapNew(theirs, size);
  CheckPattern(their_va, 0, size, peer_seed);
  Check(!g_long_call_done.load(), "the import waited for the long call to finish");
  Send(kChannel, "imported");
  Expect(kChannel, "imported");  // the peer no longer needs our endpoint
  std::fflush(nullptr);
  _exit(0);  // the long call is still running: do not wait for it
}

// ---- single-process checks ---------------------------------------------------------------

int RawExporter() {
  Init();
  const size_t size = Granularity();
  CUmemAllocationProp prop = Prop(true);
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemCreate(&handle, size, &prop, 0));
  Check(!IsLogical(handle), "raw-exporter must run without the shim");
  const CUdeviceptr va = MapNew(handle, size);
  WritePattern(va, 0, size, kCreatorSeed);
  int fd = -1;
  CU(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  Send(kChannel, "raw", fd);
  Expect(kChannel, "done");
  return 0;
}

int Basics() {
  Init();
  const size_t size = Granularity();
  CUmemAllocationProp posix = Prop(true);
  CUmemAllocationProp none = Prop(false);
  const CUmemGenericAllocationHandle unknown = 0xC5A9000000ABCDEFull;

  // NULL outputs.
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(nullptr, size, &posix, 0));
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRetainAllocationHandle(nullptr, nullptr));
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE,
            cuMemImportFromShareableHandle(nullptr, reinterpret_cast<void*>(intptr_t{0}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUmemGenericAllocationHandle tracked = 0;
  CU(cuMemCreate(&tracked, size, &posix, 0));
  Check(IsLogical(tracked), "POSIX-capable allocation is tracked");
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE,
            cuMemExportToShareableHandle(nullptr, tracked, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  int not_posix = -1;
  // A FABRIC export of a POSIX-only allocation: the driver's own answer.
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE,
            cuMemExportToShareableHandle(&not_posix, tracked, CU_MEM_HANDLE_TYPE_FABRIC, 0));

  // Unknown tagged handles get the driver's own answer for a handle it does not know (1,
  // CUDA_ERROR_INVALID_VALUE, not CUDA_ERROR_INVALID_HANDLE).
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRelease(unknown));
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, size, 0, 0, 0));
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, size, 0, unknown, 0));
  int fd = -1;
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE,
            cuMemExportToShareableHandle(&fd, unknown, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CUmemAllocationProp got{};
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationPropertiesFromHandle(&got, unknown));

  // Without POSIX handle types: tracked as well under CUSNAP_CARRY=all (the default: the
  // carrier moves private bytes too); under CUSNAP_CARRY=shared untracked, the
  // driver's own handle comes back. A retain inside its mapping gives that same handle.
  const char* carry = getenv("CUSNAP_CARRY");
  const bool carry_all = carry == nullptr || std::string(carry) != "shared";
  CUmemGenericAllocationHandle plain = 0;
  CU(cuMemCreate(&plain, size, &none, 0));
  Check(IsLogical(plain) == carry_all,
        carry_all ? "a private allocation is tracked (CUSNAP_CARRY=all)"
                  : "a private allocation passes through (CUSNAP_CARRY=shared)");
  CU(cuMemMap(va, size, 0, plain, 0));
  CUmemGenericAllocationHandle retained = 0;
  CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 64)));
  Check(retained == plain, "retain inside the mapping gives the handle it was mapped with");
  CU(cuMemRelease(retained));
  CU(cuMemUnmap(va, size));
  CU(cuMemRelease(plain));
  CU(cuMemAddressFree(va, size));

  // A retain inside a tracked mapping gives the very logical handle the range was mapped
  // with (CUDA Driver API, cuMemRetainAllocationHandle), one more reference on it.
  const CUdeviceptr tracked_va = MapNew(tracked, size);
  CUmemGenericAllocationHandle alias = 0;
  CU(cuMemRetainAllocationHandle(&alias, reinterpret_cast<void*>(tracked_va + size - 1)));
  Check(IsLogical(alias) && alias == tracked, "retain inside a tracked mapping is the mapped handle");
  CU(cuMemRelease(alias));
  // Partial unmaps of a tracked mapping are refused.
  CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(tracked_va, size / 2));

  // A descriptor that is not a ticket imports untracked, and is counted.
  int pair[2];
  Check(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0, "socketpair");
  const pid_t exporter = Respawn({"raw-exporter"}, pair[1], -1, /*with_shim=*/false);
  close(pair[1]);
  Msg raw = Expect(pair[0], "raw");
  CUmemGenericAllocationHandle imported = 0;
  CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(raw.fd)),
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  Check(!IsLogical(imported), "a non-ticket import is returned raw");
  close(raw.fd);
  const CUdeviceptr raw_va = MapNew(imported, size);
  CheckPattern(raw_va, 0, size, kCreatorSeed);
  Send(pair[0], "done");
  Check(WaitExit(exporter) == 0, "raw-exporter failed");
  Check(Identify(getpid()).untracked_imports == 1, "one untracked import counted");

  // Tickets naming a creator that is gone (pid reaped) or an earlier process with our pid,
  // and malformed tickets, are refused without reaching the driver.
  for (const auto& [pid, start] : {std::pair<int, uint64_t>{exporter, 12345},
                                   std::pair<int, uint64_t>{getpid(), cusnap::ProcessStartTime(getpid()) + 1}}) {
    cusnap::Ticket stale;
    stale.id.creator_pid = pid;
    stale.id.creator_start = start;
    stale.id.local_id = 1;
    stale.capability = cusnap::proto::Capability{{1, 2}};
    auto stale_fd = cusnap::CreateTicket(stale);
    Check(stale_fd.ok(), "CreateTicket");
    CUmemGenericAllocationHandle h = 0;
    CU_EXPECT(CUDA_ERROR_INVALID_HANDLE,
              cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(*stale_fd)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(*stale_fd);
  }
  {
    cusnap::TicketLayout layout{};
    layout.magic = cusnap::kTicketMagic;
    layout.version = 9;
    layout.kind = 1;
    layout.creator_pid = getpid();
    layout.creator_start = 1;
    layout.local_id = 1;
    layout.capability[0] = 1;
    const int forged = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    Check(forged >= 0 && pwrite(forged, &layout, sizeof layout, 0) == sizeof layout &&
              fcntl(forged, F_ADD_SEALS, cusnap::TicketSeals()) == 0,
          "forging a ticket");
    CUmemGenericAllocationHandle h = 0;
    CU_EXPECT(CUDA_ERROR_INVALID_HANDLE,
              cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(forged)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(forged);
  }
  Check(Identify(getpid()).untracked_imports == 1, "refused tickets are not counted as imports");

  // Many tracked allocations: INSPECT needs several packets.
  std::vector<CUmemGenericAllocationHandle> many(199);
  for (auto& h : many) CU(cuMemCreate(&h, size, &posix, 0));

  Send(kChannel, "untracked-imported");  // the test inspects us now
  Expect(kChannel, "release");
  Unmap(raw_va, size);
  CU(cuMemRelease(imported));
  Check(Identify(getpid()).untracked_imports == 0, "the untracked import is forgotten on release");
  Send(kChannel, "released");
  Expect(kChannel, "exit");
  return 0;
}

// ---- fork -------------------------------------------------------------------------------

int ForkEarly() {
  const pid_t child = fork();
  Check(child >= 0, "fork");
  if (child == 0) {
    g_role = "fork-early child";
    Check(!EndpointExists(getpid()), "a fork child has no endpoint before its first driver call");
    CU(cuInit(0));
    Check(EndpointExists(getpid()), "cuInit, the child's first driver call, started its endpoint");
    Init();
    CUmemAllocationProp prop = Prop(true);
    CUmemGenericAllocationHandle handle = 0;
    CU(cuMemCreate(&handle, Granularity(), &prop, 0));
    Check(IsLogical(handle), "tracked in the child");
    Check((handle & 0xFFFFFFFFFFFFull) == 1, "the child's logical counter starts at 1");
    const cusnap::proto::IdentifyReply me = Identify(getpid());
    Check(me.pid == getpid(), "the child's endpoint answers for it");
    Check(me.records == 1, "the child's table holds its one allocation");
    CU(cuMemRelease(handle));
    std::exit(0);
  }
  Check(WaitExit(child) == 0, "fork child failed");
  Check(EndpointExists(getpid()), "the parent's endpoint is still there");
  Check(!EndpointExists(child), "the child's endpoint went with it");
  Check(Identify(getpid()).pid == getpid(), "parent endpoint answers");
  return 0;
}

int ForkLate() {
  Init();
  const size_t size = 2 * Granularity();
  CUmemAllocationProp prop = Prop(true);
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemCreate(&handle, size, &prop, 0));
  const CUdeviceptr va = MapNew(handle, size);
  WritePattern(va, 0, size, kCreatorSeed);
  int first_ticket = -1;
  CU(cuMemExportToShareableHandle(&first_ticket, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

  const pid_t child = fork();
  Check(child >= 0, "fork");
  if (child == 0) {
    g_role = "fork-late child";
    // The parent's logical handle means nothing here: the driver's own answer (a forked
    // child has not initialised CUDA), never the parent's memory.
    CU_EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemRelease(handle));
    int fd = -1;
    CU_EXPECT(CUDA_ERROR_NOT_INITIALIZED,
              cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    const cusnap::proto::IdentifyReply me = Identify(getpid());
    Check(me.records == 0, "the child starts with an empty table");
    std::exit(0);  // exit handlers run: they must not free the parent's resources
  }
  Check(WaitExit(child) == 0, "fork child failed");
  Check(EndpointExists(getpid()), "the child removed the parent's endpoint");
  CheckPattern(va, 0, size, kCreatorSeed);
  // Still exportable, and an importer (our child across exec) reads the bytes.
  int ticket = -1;
  CU(cuMemExportToShareableHandle(&ticket, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  int pair[2];
  Check(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0, "socketpair");
  const pid_t importer = Respawn({"importer", "spawn", std::to_string(ticket)}, pair[1], ticket, true);
  close(pair[1]);
  Expect(pair[0], "written");
  CheckPattern(va, size / 2, size / 2, kImporterSeed);
  Send(pair[0], "verified");
  Check(WaitExit(importer) == 0, "importer failed");
  close(first_ticket);
  close(ticket);
  return 0;
}

// The process root is replaced whole in a fork child: a child forked while its parent's
// shim is quiesced starts ACTIVE with an open gate, its tracked calls do not wait. (The
// driver itself refuses a child forked after cuInit: CUDA_ERROR_NOT_INITIALIZED.)
int ForkQuiesced() {
  Init();
  CUmemAllocationProp prop = Prop(true);
  const size_t size = Granularity();
  CUmemGenericAllocationHandle handle = 0;
  CU(cuMemCreate(&handle, size, &prop, 0));
  const auto quiesced = Step(getpid(), cusnap::proto::Op::kQuiesce, /*drain ms*/ 5'000);
  Check(quiesced.ok(), "quiesce: " + (quiesced.ok() ? std::string() : quiesced.error().message));
  const pid_t child = fork();
  Check(child >= 0, "fork");
  if (child == 0) {
    g_role = "fork-quiesced child";
    CUmemGenericAllocationHandle mine = 0;
    const auto start = std::chrono::steady_clock::now();
    // The driver's own answer, at once: at a closed gate the call would wait 60 s.
    CU_EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemCreate(&mine, size, &prop, 0));
    Check(std::chrono::steady_clock::now() - start < std::chrono::seconds(5),
          "the child's tracked call did not wait at a gate");
    const cusnap::proto::IdentifyReply me = Identify(getpid());
    Check(me.state == cusnap::proto::ShimState::kActive,
          std::string("the child's shim is ACTIVE, not ") + cusnap::proto::ShimStateName(me.state));
    Check(me.records == 0, "the child's table is empty");
    std::exit(0);
  }
  Check(WaitExit(child) == 0, "fork child failed");
  Check(Identify(getpid()).state == cusnap::proto::ShimState::kQuiesced,
        "the parent stays QUIESCED");
  const auto resumed = Step(getpid(), cusnap::proto::Op::kResume);
  Check(resumed.ok(), "resume: " + (resumed.ok() ? std::string() : resumed.error().message));
  CU(cuMemRelease(handle));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Fail("usage: actor_share <role> [args]");
  const std::string role = argv[1];
  g_role = role;
  if (role == "creator" && argc >= 3) return Creator(argv[2]);
  if (role == "importer" && argc >= 3) return Importer(argv[2], argc >= 4 ? argv[3] : "");
  if (role == "mutual") return Mutual();
  if (role == "basics") return Basics();
  if (role == "raw-exporter") return RawExporter();
  if (role == "fork-early") return ForkEarly();
  if (role == "fork-late") return ForkLate();
  if (role == "fork-quiesced") return ForkQuiesced();
  Fail("unknown role " + role);
}
