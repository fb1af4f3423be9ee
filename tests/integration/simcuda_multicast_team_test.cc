// Multicast teams across processes on the simulated driver: 2- and 4-process teams built from
// an exported object (SCM_RIGHTS), AddDevice from every member process, binds that stay
// blocked until the last AddDevice, all four bind ABIs, unbind then BindAddr rebind, the
// multimem all-reduce hook summing members that live in other processes (run from two
// different processes), release semantics across processes, and a native checkpoint refused
// while the target holds a multicast object.
//
// Every CUDA call runs in forked children (forked before this process touches the driver) that
// step through a script on single-byte pipe commands; values (ids, pids, counts) come back as
// 8-byte words on the reply pipe.
#include <poll.h>
#include <sched.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

constexpr size_t kMember = 2 * kGranularity;  // bytes each device binds

void send_word(const Pipe &p, uint64_t v) { ASSERT_EQ(write(p.fds[1], &v, sizeof v), static_cast<ssize_t>(sizeof v)); }
uint64_t receive_word(const Pipe &p) {
  uint64_t v = ~uint64_t{0};
  return read(p.fds[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v) ? v : ~uint64_t{0};
}
bool readable(const Pipe &p) {
  pollfd pfd{p.fds[0], POLLIN, 0};
  return poll(&pfd, 1, 0) == 1;
}

// A child process and its three channels: commands in, replies out, descriptors both ways.
struct Rank {
  Pipe command, reply;
  SocketPair socket;  // parent end fds[0], child end fds[1]
  pid_t pid = -1;
};

void drop(int &fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Forks `body` as the process of ranks[index]. The child keeps only its own ends of its own
// channels and the parent only its ends, so a child that fails shows as end of file on its
// reply pipe rather than as a hang.
void start(std::vector<Rank> &ranks, size_t index, const std::function<int()> &body) {
  ranks[index].pid = fork_child([&] {
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank &other = ranks[i];
      if (i != index) {
        for (int *fd : {&other.command.fds[0], &other.command.fds[1], &other.reply.fds[0], &other.reply.fds[1],
                        &other.socket.fds[0], &other.socket.fds[1]})
          drop(*fd);
      }
    }
    drop(ranks[index].command.fds[1]);
    drop(ranks[index].reply.fds[0]);
    drop(ranks[index].socket.fds[0]);
    return body();
  });
  drop(ranks[index].command.fds[0]);
  drop(ranks[index].reply.fds[1]);
  drop(ranks[index].socket.fds[1]);
}

CUmulticastObjectProp team_prop(unsigned devices, size_t size) {
  CUmulticastObjectProp p{};
  p.numDevices = devices;
  p.size = size;
  p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

bool fill_floats(CUdeviceptr va, size_t bytes, float value) {
  std::vector<float> v(bytes / sizeof(float), value);
  return cuMemcpyHtoD_v2(va, v.data(), bytes) == CUDA_SUCCESS;
}

bool all_floats(CUdeviceptr va, size_t bytes, float value) {
  std::vector<float> v(bytes / sizeof(float));
  if (cuMemcpyDtoH_v2(v.data(), va, bytes) != CUDA_SUCCESS) return false;
  for (float f : v)
    if (f != value) return false;
  return true;
}

// The object in rank 0 is created and exported; the others import the descriptor the parent
// relays. Returns 0 and sets *mc, or a nonzero step code.
int join_object(const Rank &self, int rank, unsigned devices, CUmemGenericAllocationHandle *mc) {
  CUmulticastObjectProp prop = team_prop(devices, kMember);
  if (rank == 0) {
    if (cuMulticastCreate(mc, &prop) != CUDA_SUCCESS) return 30;
    int fd = -1;
    if (cuMemExportToShareableHandle(&fd, *mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) return 31;
    send_fd(self.socket.fds[1], fd);
    close(fd);
    return 0;
  }
  int fd = receive_fd(self.socket.fds[1]);
  if (fd < 0) return 32;
  CUmemGenericAllocationHandle again = 0;
  auto os = reinterpret_cast<void *>(static_cast<intptr_t>(fd));
  if (cuMemImportFromShareableHandle(mc, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) return 33;
  if (cuMemImportFromShareableHandle(&again, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) return 34;
  close(fd);
  if (again != *mc || cuMemRelease(again) != CUDA_SUCCESS) return 35;  // one handle per object per process
  return 0;
}

// Binds kMember bytes of the member at multicast offset 0 for device `rank`, through ABI
// `abi` (rank % 4: BindMem, BindMem_v2, BindAddr, BindAddr_v2).
CUresult bind_member(int abi, CUmemGenericAllocationHandle mc, int rank, CUmemGenericAllocationHandle member,
                     CUdeviceptr va) {
  switch (abi % 4) {
    case 0: return cuMulticastBindMem(mc, 0, member, 0, kMember, 0);
    case 1: return cuMulticastBindMem_v2(mc, rank, 0, member, 0, kMember, 0);
    case 2: return cuMulticastBindAddr(mc, 0, va, kMember, 0);
    default: return cuMulticastBindAddr_v2(mc, rank, 0, va, kMember, 0);
  }
}

// One member of an N-device team (device = rank). Script:
//   join the object, make a member filled with rank+1, AddDevice ('A'; the last rank first waits
//   for 'G'), bind on a second thread and say 'W' once the bind is inside the driver, 'B' when
//   it returned; map the object; on 'I' report id, holders, devices, bindings and (rank 0) the
//   binding pids; then serve commands: 'R' all-reduce, 'V' check the member holds the value sent next,
//   'U' unbind and rebind with BindAddr v1, 'Q' quit.
int rank_main(const Rank &self, int rank, unsigned devices) {
  if (cuInit(0) != CUDA_SUCCESS || use_device(rank) == nullptr) return 10;
  CUmemGenericAllocationHandle mc = 0;
  if (int step = join_object(self, rank, devices, &mc); step != 0) return step;
  CUmemGenericAllocationHandle member = 0;
  CUmemAllocationProp prop = device_prop(rank, true);
  if (cuMemCreate(&member, kMember, &prop, 0) != CUDA_SUCCESS) return 11;
  CUdeviceptr va = map_rw(member, kMember, rank);
  if (va == 0 || !fill_floats(va, kMember, static_cast<float>(rank + 1))) return 12;
  if (rank == static_cast<int>(devices) - 1 && self.command.receive() != 'G') return 13;
  if (cuMulticastAddDevice(mc, rank) != CUDA_SUCCESS) return 14;
  if (cuMulticastAddDevice(mc, rank) != CUDA_ERROR_INVALID_VALUE) return 15;  // each device once
  self.reply.send('A');
  std::atomic<CUresult> bound{CUDA_ERROR_UNKNOWN};
  std::atomic<bool> done{false};
  std::thread binder([&] {
    use_device(rank);  // BindAddr v1 binds for this thread's current context's device
    bound = bind_member(rank, mc, rank, member, va);
    done = true;
  });
  while (simcuda_test_calls_in_flight() == 0 && !done) sched_yield();  // the bind is in the driver
  self.reply.send('W');
  binder.join();
  if (bound != CUDA_SUCCESS) return 16;
  self.reply.send('B');
  CUdeviceptr mc_va = map_rw(mc, kMember, rank);
  if (mc_va == 0) return 17;
  if (self.command.receive() != 'I') return 27;  // every rank has bound
  simcuda_multicast_info info{};
  if (simcuda_test_multicast_info(mc, &info) != 0) return 18;
  send_word(self.reply, info.id);
  send_word(self.reply, info.holders);
  send_word(self.reply, info.devices_added);
  send_word(self.reply, info.bindings);
  if (rank == 0) {
    std::vector<simcuda_multicast_binding> b(devices);
    if (simcuda_test_multicast_bindings(mc, b.data(), b.size()) != devices) return 19;
    for (const auto &binding : b) send_word(self.reply, static_cast<uint64_t>(binding.pid));
  }
  for (;;) {
    switch (self.command.receive()) {
      case 'R':
        if (simcuda_test_multimem_all_reduce(mc, 0, kMember, SIMCUDA_MULTIMEM_F32) != CUDA_SUCCESS) return 20;
        self.reply.send('D');
        break;
      case 'V': {
        auto expected = static_cast<float>(receive_word(self.command));
        self.reply.send(all_floats(va, kMember, expected) ? 'v' : 'x');
        break;
      }
      case 'U':
        if (cuMulticastUnbind(mc, rank, 0, kMember) != CUDA_SUCCESS) return 21;
        if (cuMulticastUnbind(mc, rank, 0, kMember) != CUDA_ERROR_INVALID_VALUE) return 22;  // gone
        if (cuMulticastBindAddr(mc, 0, va, kMember, 0) != CUDA_SUCCESS) return 23;
        self.reply.send('u');
        break;
      case 'Q':
        if (cuMemUnmap(mc_va, kMember) != CUDA_SUCCESS || cuMemRelease(mc) != CUDA_SUCCESS) return 24;
        return simcuda_test_multicast_info(mc, &info) == 0 ? 25 : 0;  // this process holds it no more
      default:
        return 26;
    }
  }
}

// Drives an N-process team through the whole script.
void run_team(unsigned n) {
  setenv("SIMCUDA_DEVICE_COUNT", std::to_string(n).c_str(), 1);
  std::vector<Rank> ranks(n);
  for (unsigned r = 0; r < n; ++r) start(ranks, r, [&ranks, r, n] { return rank_main(ranks[r], static_cast<int>(r), n); });
  // Relay the exported object from rank 0 to every other rank.
  int fd = receive_fd(ranks[0].socket.fds[0]);
  ASSERT_GE(fd, 0);
  for (unsigned r = 1; r < n; ++r) send_fd(ranks[r].socket.fds[0], fd);
  close(fd);
  // Every rank but the last has added its device and sits inside its bind.
  for (unsigned r = 0; r + 1 < n; ++r) {
    ASSERT_EQ(ranks[r].reply.receive(), 'A') << "rank " << r;
    ASSERT_EQ(ranks[r].reply.receive(), 'W') << "rank " << r;
  }
  for (unsigned r = 0; r + 1 < n; ++r) EXPECT_FALSE(readable(ranks[r].reply)) << "rank " << r << " bound before the team was complete";
  ranks[n - 1].command.send('G');
  for (unsigned r = 0; r < n; ++r) {
    if (r == n - 1) {
      ASSERT_EQ(ranks[r].reply.receive(), 'A');
      ASSERT_EQ(ranks[r].reply.receive(), 'W');
    }
    ASSERT_EQ(ranks[r].reply.receive(), 'B') << "rank " << r;
  }
  // One team, seen alike from every process.
  for (unsigned r = 0; r < n; ++r) ranks[r].command.send('I');
  uint64_t id = 0;
  for (unsigned r = 0; r < n; ++r) {
    uint64_t rank_id = receive_word(ranks[r].reply);
    if (r == 0) id = rank_id;
    EXPECT_EQ(rank_id, id);
    EXPECT_EQ(receive_word(ranks[r].reply), n);                   // holders
    EXPECT_EQ(receive_word(ranks[r].reply), (uint64_t{1} << n) - 1);  // devices added
    EXPECT_EQ(receive_word(ranks[r].reply), n);                   // bindings
  }
  for (unsigned r = 0; r < n; ++r) EXPECT_EQ(receive_word(ranks[0].reply), static_cast<uint64_t>(ranks[r].pid));
  // Members held 1..n: after the all-reduce every member holds their sum.
  float sum = static_cast<float>(n * (n + 1) / 2);
  ranks[0].command.send('R');
  ASSERT_EQ(ranks[0].reply.receive(), 'D');
  for (unsigned r = 0; r < n; ++r) {
    ranks[r].command.send('V');
    send_word(ranks[r].command, static_cast<uint64_t>(sum));
    EXPECT_EQ(ranks[r].reply.receive(), 'v') << "rank " << r;
  }
  // The last rank unbinds and rebinds by address (as PyTorch does); the team still reduces,
  // now run from another process.
  ranks[n - 1].command.send('U');
  ASSERT_EQ(ranks[n - 1].reply.receive(), 'u');
  ranks[n - 1].command.send('R');
  ASSERT_EQ(ranks[n - 1].reply.receive(), 'D');
  for (unsigned r = 0; r < n; ++r) {
    ranks[r].command.send('V');
    send_word(ranks[r].command, static_cast<uint64_t>(sum * static_cast<float>(n)));
    EXPECT_EQ(ranks[r].reply.receive(), 'v') << "rank " << r;
  }
  for (unsigned r = 0; r < n; ++r) ranks[r].command.send('Q');
  for (unsigned r = 0; r < n; ++r) EXPECT_EQ(wait_child(ranks[r].pid), 0) << "rank " << r;
}

TEST(SimcudaMulticastTeam, TwoProcesses) { run_team(2); }

TEST(SimcudaMulticastTeam, FourProcesses) { run_team(4); }

// The creator releases its handle once the other process imported; the object lives on there,
// then only through a mapping (no handle left), then not at all.
TEST(SimcudaMulticastTeam, ObjectLivesWhileAnyHandleOrMappingExists) {
  std::vector<Rank> ranks(2);
  Rank &creator = ranks[0], &importer = ranks[1];
  start(ranks, 0, [&] {
    CUmemGenericAllocationHandle mc = 0;
    if (cuInit(0) != CUDA_SUCCESS) return 10;
    if (int step = join_object(creator, 0, 2, &mc); step != 0) return step;
    if (creator.command.receive() != 'R') return 11;
    if (cuMemRelease(mc) != CUDA_SUCCESS) return 12;
    if (simcuda_test_allocation_count() != 0) return 13;
    int fd = -1;
    if (cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_ERROR_INVALID_VALUE) return 14;
    creator.reply.send('r');
    return 0;
  });
  start(ranks, 1, [&] {
    CUmemGenericAllocationHandle mc = 0;
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    if (int step = join_object(importer, 1, 2, &mc); step != 0) return step;
    simcuda_multicast_info info{};
    if (simcuda_test_multicast_info(mc, &info) != 0 || info.holders != 2) return 11;
    importer.reply.send('I');
    if (importer.command.receive() != 'C') return 12;  // the creator has released its handle
    if (simcuda_test_multicast_info(mc, &info) != 0 || info.holders != 1) return 13;
    // One process may add every device and bind memory for each of them.
    if (cuMulticastAddDevice(mc, 0) != CUDA_SUCCESS || cuMulticastAddDevice(mc, 1) != CUDA_SUCCESS) return 14;
    CUmemGenericAllocationHandle member[2] = {};
    for (int d = 0; d < 2; ++d) {
      CUmemAllocationProp prop = device_prop(d, true);
      if (cuMemCreate(&member[d], kMember, &prop, 0) != CUDA_SUCCESS) return 15;
      if (cuMulticastBindMem(mc, 0, member[d], 0, kMember, 0) != CUDA_SUCCESS) return 16;
    }
    CUdeviceptr mc_va = map_rw(mc, kMember, 0);
    if (mc_va == 0 || cuMemRelease(mc) != CUDA_SUCCESS) return 17;
    // No handle left, only the mapping: the handle is no longer valid in calls, the object lives.
    if (cuMulticastAddDevice(mc, 1) != CUDA_ERROR_INVALID_VALUE) return 18;
    if (simcuda_test_multicast_info(mc, &info) != 0 || info.holders != 1 || info.bindings != 2) return 19;
    CUmemGenericAllocationHandle retained = 0;
    if (cuMemRetainAllocationHandle(&retained, reinterpret_cast<void *>(mc_va)) != CUDA_SUCCESS || retained != mc) return 20;
    if (cuMulticastUnbind(mc, 1, 0, kMember) != CUDA_SUCCESS) return 21;  // valid again
    if (cuMemRelease(retained) != CUDA_SUCCESS || cuMemUnmap(mc_va, kMember) != CUDA_SUCCESS) return 22;
    if (simcuda_test_multicast_info(mc, &info) == 0) return 23;  // gone from this process
    for (CUmemGenericAllocationHandle m : member)
      if (cuMemRelease(m) != CUDA_SUCCESS) return 24;
    return simcuda_test_allocation_count() == 0 ? 0 : 25;
  });
  int fd = receive_fd(creator.socket.fds[0]);
  ASSERT_GE(fd, 0);
  send_fd(importer.socket.fds[0], fd);
  close(fd);
  ASSERT_EQ(importer.reply.receive(), 'I');
  creator.command.send('R');
  ASSERT_EQ(creator.reply.receive(), 'r');
  importer.command.send('C');
  EXPECT_EQ(wait_child(creator.pid), 0);
  EXPECT_EQ(wait_child(importer.pid), 0);
}

// A native checkpoint of a process holding a multicast object (even unbound) hangs on real
// drivers; here it fails CUDA_ERROR_TIMEOUT after the lock's timeout, leaves the process LOCKED
// with everything intact, and the process works on after unlock. Without the object, the same
// cycle succeeds.
TEST(SimcudaMulticastTeam, CheckpointRefusedWhileAMulticastObjectExists) {
  std::vector<Rank> ranks(1);
  Rank &child = ranks[0];
  start(ranks, 0, [&] {
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUmemGenericAllocationHandle mc = 0, memory = 0;
    CUmulticastObjectProp prop = team_prop(1, kMember);
    if (cuMulticastCreate(&mc, &prop) != CUDA_SUCCESS) return 11;
    CUmemAllocationProp mprop = device_prop(0, true);
    if (cuMemCreate(&memory, kMember, &mprop, 0) != CUDA_SUCCESS) return 12;
    CUdeviceptr va = map_rw(memory, kMember, 0);
    if (va == 0 || !fill_pattern(va, kMember, 5)) return 13;
    child.reply.send('1');
    if (child.command.receive() != '2') return 14;  // refused checkpoint, unlocked again
    if (!has_pattern(va, kMember, 5)) return 15;
    if (cuMulticastAddDevice(mc, 0) != CUDA_SUCCESS || cuMulticastBindMem(mc, 0, memory, 0, kMember, 0) != CUDA_SUCCESS)
      return 16;
    if (cuMulticastUnbind(mc, 0, 0, kMember) != CUDA_SUCCESS || cuMemRelease(mc) != CUDA_SUCCESS) return 17;
    child.reply.send('3');
    if (child.command.receive() != '4') return 18;  // full native cycle without the object
    return has_pattern(va, kMember, 5) ? 0 : 19;
  });
  ASSERT_EQ(child.reply.receive(), '1');
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 100;
  CUprocessState state{};
  ASSERT_EQ(cuCheckpointProcessLock(child.pid, &lock), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(child.pid, nullptr), CUDA_ERROR_TIMEOUT);
  ASSERT_EQ(cuCheckpointProcessGetState(child.pid, &state), CUDA_SUCCESS);
  EXPECT_EQ(state, CU_PROCESS_STATE_LOCKED);
  EXPECT_EQ(cuCheckpointProcessRestore(child.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);  // never checkpointed
  ASSERT_EQ(cuCheckpointProcessUnlock(child.pid, nullptr), CUDA_SUCCESS);
  child.command.send('2');
  ASSERT_EQ(child.reply.receive(), '3');
  ASSERT_EQ(cuCheckpointProcessLock(child.pid, &lock), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(child.pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessRestore(child.pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(child.pid, nullptr), CUDA_SUCCESS);
  child.command.send('4');
  EXPECT_EQ(wait_child(child.pid), 0);
}

}  // namespace
