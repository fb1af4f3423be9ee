// The checkpoint API acting on other processes, one test per DRIVER-FACTS row F1-F7: exact
// CUresults, process states, bytes read back and memory shown released across processes.
// Children are forked before this process calls cuInit (a child forked after it has no usable
// driver) and driven step by step over pipes; descriptors travel by SCM_RIGHTS.
#include <atomic>
#include <poll.h>
#include <signal.h>

#include <thread>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

constexpr size_t kSize = 4 * kGranularity;  // 8 MiB per allocation

size_t used_on(int device) {
  CUcontext ctx = use_device(device);
  EXPECT_NE(ctx, nullptr);
  size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  return total - free;
}

// lock -> checkpoint -> restore -> unlock, every step CUDA_SUCCESS with the expected state.
void full_cycle(pid_t pid, CUcheckpointRestoreArgs *restore_args = nullptr) {
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 10000;
  ASSERT_EQ(cuCheckpointProcessLock(pid, &lock), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_LOCKED);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_CHECKPOINTED);
  ASSERT_EQ(cuCheckpointProcessRestore(pid, restore_args), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_LOCKED);
  ASSERT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(pid), CU_PROCESS_STATE_RUNNING);
}

// A child that creates one allocation on device 0 mapped read-write with pattern `seed`.
struct Owner {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  int setup(bool posix, unsigned seed) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUmemAllocationProp prop = device_prop(0, posix);
    if (cuMemCreate(&handle, kSize, &prop, 0) != CUDA_SUCCESS) return 11;
    va = map_rw(handle, kSize, 0);
    if (va == 0 || !fill_pattern(va, kSize, seed)) return 12;
    return 0;
  }
  int export_result() {
    int fd = -1;
    CUresult r = cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (fd >= 0) close(fd);
    return r;
  }
};

TEST(SimcudaCheckpoint, UnknownProcessIsInvalidValue) {
  Child plain;  // never calls cuInit: no checkpoint service
  plain.start([](const Pipe &command, const Pipe &) { return command.receive() == 'Q' ? 0 : 1; });
  CUprocessState state{};
  EXPECT_EQ(cuCheckpointProcessGetState(plain.pid, &state), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessLock(plain.pid, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessGetState(-5, &state), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCheckpointProcessGetState(plain.pid, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUcheckpointLockArgs reserved{};
  reserved.reserved0 = 1;
  EXPECT_EQ(cuCheckpointProcessLock(plain.pid, &reserved), CUDA_ERROR_INVALID_VALUE);
  plain.command.send('Q');
  EXPECT_EQ(wait_child(plain.pid), 0);
}

// F1: private allocation, full cycle, states and bytes; memory shown released in between.
TEST(SimcudaCheckpoint, F1PrivateAllocationSurvivesNativeCycle) {
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(false, 1)) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    if (!has_pattern(o.va, kSize, 1)) return 21;
    simcuda_mapping_info info{};
    if (simcuda_test_mapping_at(o.va, &info) != 0 || info.native_cycled != 1 || info.location_id != 0) return 22;
    return 0;
  });
  ASSERT_EQ(c.reply.receive(), 'R');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(used_on(0), kSize);
  int tid = 0;
  ASSERT_EQ(cuCheckpointProcessGetRestoreThreadId(c.pid, &tid), CUDA_SUCCESS);
  EXPECT_GT(tid, 0);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_RUNNING);
  // Transitions out of order are refused.
  EXPECT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessCheckpoint(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCheckpointProcessLock(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessLock(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessRestore(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(used_on(0), 0u);  // released, as cuMemGetInfo in another process sees it
  EXPECT_EQ(cuCheckpointProcessCheckpoint(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCheckpointProcessRestore(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_LOCKED);
  EXPECT_EQ(used_on(0), kSize);
  ASSERT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_RUNNING);
  c.command.send('V');
  EXPECT_EQ(wait_child(c.pid), 0);
}

// The state and the restore thread are answered while the process is stopped (as CRIU holds a
// process it seized or froze), without its help, as the real driver answers them; the
// operations that need the process wait for it.
TEST(SimcudaCheckpoint, StateAndRestoreThreadAreAnsweredForAStoppedProcess) {
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(false, 3)) return e;
    reply.send('R');
    return command.receive() == 'Q' ? 0 : 1;
  });
  ASSERT_EQ(c.reply.receive(), 'R');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int running_tid = 0;
  ASSERT_EQ(cuCheckpointProcessGetRestoreThreadId(c.pid, &running_tid), CUDA_SUCCESS);
  full_cycle(c.pid);
  CUcheckpointLockArgs lock{};
  ASSERT_EQ(cuCheckpointProcessLock(c.pid, &lock), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(c.pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(kill(c.pid, SIGSTOP), 0);
  int tid = 0;
  EXPECT_EQ(cuCheckpointProcessGetRestoreThreadId(c.pid, &tid), CUDA_SUCCESS);
  EXPECT_EQ(tid, running_tid);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_CHECKPOINTED);
  ASSERT_EQ(kill(c.pid, SIGCONT), 0);
  ASSERT_EQ(cuCheckpointProcessRestore(c.pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_RUNNING);
  c.command.send('Q');
  EXPECT_EQ(wait_child(c.pid), 0);
  CUprocessState state{};
  EXPECT_EQ(cuCheckpointProcessGetState(c.pid, &state), CUDA_ERROR_INVALID_VALUE);  // gone
}

// F2 + F3: a POSIX-capable allocation never exported survives the cycle; exporting it
// afterwards fails CUDA_ERROR_INVALID_VALUE; a fresh allocation still exports.
TEST(SimcudaCheckpoint, F2F3PosixCapableSurvivesButCannotBeExportedAfterRestore) {
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(true, 2)) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    if (!has_pattern(o.va, kSize, 2)) return 21;
    if (o.export_result() != CUDA_ERROR_INVALID_VALUE) return 22;
    Owner fresh;
    CUmemAllocationProp prop = device_prop(0, true);
    if (cuMemCreate(&fresh.handle, kGranularity, &prop, 0) != CUDA_SUCCESS) return 23;
    if (fresh.export_result() != CUDA_SUCCESS) return 24;
    return 0;
  });
  ASSERT_EQ(c.reply.receive(), 'R');
  full_cycle(c.pid);
  c.command.send('V');
  EXPECT_EQ(wait_child(c.pid), 0);
}

// The importer side shared by F4-F6: receives a descriptor, imports it on device 1, maps it,
// checks the creator's pattern and closes the descriptor.
struct Importer {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  int import_and_map(int socket, unsigned seed) {
    int fd = receive_fd(socket);
    if (fd < 0) return 30;
    if (cuMemImportFromShareableHandle(&handle, reinterpret_cast<void *>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
      return 31;
    close(fd);
    if (va == 0 && cuMemAddressReserve(&va, kSize, 0, 0, 0) != CUDA_SUCCESS) return 32;
    if (cuMemMap(va, kSize, 0, handle, 0) != CUDA_SUCCESS) return 33;
    CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemSetAccess(va, kSize, &access, 1) != CUDA_SUCCESS) return 34;
    return has_pattern(va, kSize, seed) ? 0 : 35;
  }
  int unmap_and_release() {
    if (cuMemUnmap(va, kSize) != CUDA_SUCCESS) return 36;
    return cuMemRelease(handle) == CUDA_SUCCESS ? 0 : 37;
  }
};

int export_to(Owner &o, int socket) {
  int fd = -1;
  if (cuMemExportToShareableHandle(&fd, o.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) return 13;
  send_fd(socket, fd);
  close(fd);
  return 0;
}

// F4: the importer unmapped and released; the owner keeps its mapping; both cycle; the owner's
// bytes are intact but it can no longer export.
TEST(SimcudaCheckpoint, F4ReleasedImportLetsBothCycleButOwnerCannotReexport) {
  SocketPair sockets;
  Child owner, importer;
  owner.start([&](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(true, 4)) return e;
    if (int e = export_to(o, sockets.fds[0])) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    if (!has_pattern(o.va, kSize, 4)) return 21;
    return o.export_result() == CUDA_ERROR_INVALID_VALUE ? 0 : 22;
  });
  importer.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    Importer i;
    if (int e = i.import_and_map(sockets.fds[1], 4)) return e;
    if (int e = i.unmap_and_release()) return e;
    reply.send('D');
    return command.receive() == 'V' && simcuda_test_allocation_count() == 0 ? 0 : 20;
  });
  ASSERT_EQ(owner.reply.receive(), 'R');
  ASSERT_EQ(importer.reply.receive(), 'D');
  full_cycle(owner.pid);
  full_cycle(importer.pid);
  owner.command.send('V');
  importer.command.send('V');
  EXPECT_EQ(wait_child(owner.pid), 0);
  EXPECT_EQ(wait_child(importer.pid), 0);
}

// F5: the importer still maps the shared allocation: lock and checkpoint succeed on both, the
// owner restores, the importer's restore fails 801 and it stays CHECKPOINTED; its unlock fails
// 401; it is stuck (killed by the test).
TEST(SimcudaCheckpoint, F5ImporterWithMappedImportIsStuckCheckpointed) {
  SocketPair sockets;
  Child owner, importer;
  owner.start([&](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(true, 5)) return e;
    if (int e = export_to(o, sockets.fds[0])) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    return has_pattern(o.va, kSize, 5) ? 0 : 21;
  });
  importer.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    Importer i;
    if (int e = i.import_and_map(sockets.fds[1], 5)) return e;
    reply.send('M');
    command.receive();  // never comes: the test kills this process
    return 0;
  });
  ASSERT_EQ(owner.reply.receive(), 'R');
  ASSERT_EQ(importer.reply.receive(), 'M');
  ASSERT_NO_FATAL_FAILURE(expect_importer_stuck(owner.pid, importer.pid, CUDA_ERROR_NOT_SUPPORTED));
  EXPECT_EQ(static_cast<int>(CUDA_ERROR_NOT_SUPPORTED), 801);
  end_stuck_pair(owner, importer);
}

// F6: the host-carrier sequence. The owner copies out, unmaps and releases (keeping the VA),
// the importer releases; both cycle; the owner makes a fresh allocation at the same VA, copies
// back and exports; the importer imports and maps at its old VA. Bytes intact on both sides,
// and a write by the importer is read by the owner.
TEST(SimcudaCheckpoint, F6HostCarrierSequenceWorks) {
  SocketPair sockets;
  Child owner, importer;
  owner.start([&](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(true, 6)) return e;
    if (int e = export_to(o, sockets.fds[0])) return e;
    reply.send('R');
    if (command.receive() != 'C') return 20;
    std::string carrier(kSize, '\0');
    if (cuMemcpyDtoH_v2(carrier.data(), o.va, kSize) != CUDA_SUCCESS) return 21;
    if (cuMemUnmap(o.va, kSize) != CUDA_SUCCESS || cuMemRelease(o.handle) != CUDA_SUCCESS) return 22;
    reply.send('c');
    if (command.receive() != 'N') return 23;
    CUmemAllocationProp prop = device_prop(0, true);
    if (cuMemCreate(&o.handle, kSize, &prop, 0) != CUDA_SUCCESS) return 24;
    if (cuMemMap(o.va, kSize, 0, o.handle, 0) != CUDA_SUCCESS) return 25;
    CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemSetAccess(o.va, kSize, &access, 1) != CUDA_SUCCESS) return 26;
    if (cuMemcpyHtoD_v2(o.va, carrier.data(), kSize) != CUDA_SUCCESS) return 27;
    if (int e = export_to(o, sockets.fds[0])) return e;
    reply.send('n');
    if (command.receive() != 'V') return 28;
    if (!has_pattern(o.va + kGranularity, kSize - kGranularity, 6)) return 29;
    return has_pattern(o.va, kGranularity, 66) ? 0 : 30;  // the importer's write
  });
  importer.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    Importer i;
    if (int e = i.import_and_map(sockets.fds[1], 6)) return e;
    reply.send('M');
    if (command.receive() != 'C') return 20;
    if (int e = i.unmap_and_release()) return e;
    reply.send('c');
    if (command.receive() != 'N') return 21;
    CUdeviceptr old_va = i.va;
    if (int e = i.import_and_map(sockets.fds[1], 6)) return e;  // at its old VA
    if (i.va != old_va || !fill_pattern(i.va, kGranularity, 66)) return 22;
    reply.send('n');
    return command.receive() == 'Q' ? 0 : 23;
  });
  ASSERT_EQ(owner.reply.receive(), 'R');
  ASSERT_EQ(importer.reply.receive(), 'M');
  owner.command.send('C');
  importer.command.send('C');
  ASSERT_EQ(owner.reply.receive(), 'c');
  ASSERT_EQ(importer.reply.receive(), 'c');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(used_on(0), 0u);  // the carrier holds the bytes, not the device
  full_cycle(owner.pid);
  full_cycle(importer.pid);
  owner.command.send('N');
  ASSERT_EQ(owner.reply.receive(), 'n');
  importer.command.send('N');
  ASSERT_EQ(importer.reply.receive(), 'n');
  owner.command.send('V');
  EXPECT_EQ(wait_child(owner.pid), 0);
  importer.command.send('Q');
  EXPECT_EQ(wait_child(importer.pid), 0);
}

// F7, as measured on 2x H200 (driver 580, CUDA 13.0): a restore with GPU pairs {0->1, 1->0}
// keeps the process's ordinals and swaps the physical GPUs behind them. Its context stays on
// ordinal 0, cuDeviceGetUuid(0) now names the other GPU, its natively restored memory
// (cuMemAlloc on ordinal 0, private VMM on ordinal 1) keeps its ordinal, access and bytes and
// is accounted on the new physical GPU; a fresh allocation on ordinal 0 lands on the GPU now
// behind it. A pair naming an unknown GPU is refused and changes nothing.
TEST(SimcudaCheckpoint, F7RestoreKeepsOrdinalsAndSwapsThePhysicalGpus) {
  constexpr size_t kOnOrdinal0 = kSize, kOnOrdinal1 = 2 * kSize;  // tell the GPUs apart by bytes
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS) return 10;
    CUuuid before[2] = {};
    for (int d = 0; d < 2; ++d)
      if (cuDeviceGetUuid_v2(&before[d], d) != CUDA_SUCCESS) return 11;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop = device_prop(1, false);
    if (cuMemCreate(&h, kOnOrdinal1, &prop, 0) != CUDA_SUCCESS) return 12;
    CUdeviceptr vmm_va = map_rw(h, kOnOrdinal1, 1);
    if (vmm_va == 0 || use_device(1) == nullptr || !fill_pattern(vmm_va, kOnOrdinal1, 71u)) return 13;
    CUdeviceptr malloc_va = 0;
    if (use_device(0) == nullptr || cuMemAlloc_v2(&malloc_va, kOnOrdinal0) != CUDA_SUCCESS) return 14;
    if (!fill_pattern(malloc_va, kOnOrdinal0, 70u)) return 15;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    CUdevice current = -1;
    if (cuCtxGetDevice(&current) != CUDA_SUCCESS || current != 0) return 21;  // still ordinal 0
    CUuuid after[2] = {};
    for (int d = 0; d < 2; ++d)
      if (cuDeviceGetUuid_v2(&after[d], d) != CUDA_SUCCESS) return 22;
    if (std::memcmp(after[0].bytes, before[1].bytes, 16) != 0 || std::memcmp(after[1].bytes, before[0].bytes, 16) != 0)
      return 23;  // the GPUs behind the ordinals swapped
    char name[64] = {};
    if (cuDeviceGetName(name, sizeof name, 0) != CUDA_SUCCESS || std::strstr(name, "device 1") == nullptr) return 24;
    const CUdeviceptr vas[2] = {malloc_va, vmm_va};
    const size_t sizes[2] = {kOnOrdinal0, kOnOrdinal1};
    for (int d = 0; d < 2; ++d) {
      simcuda_mapping_info info{};
      if (simcuda_test_mapping_at(vas[d], &info) != 0) return 25;
      if (info.location_id != d || info.access[d] != CU_MEM_ACCESS_FLAGS_PROT_READWRITE || info.access[1 - d] != 0)
        return 26;  // location and access keep the process's ordinal
      if (!has_pattern(vas[d], sizes[d], 70u + static_cast<unsigned>(d))) return 27;
    }
    // Accounted on the physical GPUs: ordinal 0's memory on GPU 1, ordinal 1's on GPU 0.
    if (simcuda_test_bytes_in_use(1) != kOnOrdinal0 || simcuda_test_bytes_in_use(0) != kOnOrdinal1) return 28;
    size_t free = 0, total = 0;  // cuMemGetInfo of ordinal 0 counts physical GPU 1
    if (cuMemGetInfo_v2(&free, &total) != CUDA_SUCCESS || total - free != kOnOrdinal0) return 29;
    CUmemGenericAllocationHandle fresh = 0;
    CUmemAllocationProp fresh_prop = device_prop(0, false);
    if (cuMemCreate(&fresh, kSize, &fresh_prop, 0) != CUDA_SUCCESS) return 30;
    if (simcuda_test_ledger_bytes(1) != kOnOrdinal0 + kSize || simcuda_test_ledger_bytes(0) != kOnOrdinal1) return 31;
    return cuMemRelease(fresh) == CUDA_SUCCESS ? 0 : 32;
  });
  ASSERT_EQ(c.reply.receive(), 'R');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUuuid gpu0{}, gpu1{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&gpu0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid_v2(&gpu1, 1), CUDA_SUCCESS);
  EXPECT_EQ(used_on(0), kOnOrdinal0);
  EXPECT_EQ(used_on(1), kOnOrdinal1);
  ASSERT_EQ(cuCheckpointProcessLock(c.pid, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(used_on(0), 0u);
  EXPECT_EQ(used_on(1), 0u);
  CUcheckpointGpuPair unknown[1] = {{gpu0, CUuuid{}}};
  CUcheckpointRestoreArgs bad{};
  bad.gpuPairs = unknown;
  bad.gpuPairsCount = 1;
  EXPECT_EQ(cuCheckpointProcessRestore(c.pid, &bad), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_CHECKPOINTED);
  CUcheckpointGpuPair swap[2] = {{gpu0, gpu1}, {gpu1, gpu0}};
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = swap;
  args.gpuPairsCount = 2;
  ASSERT_EQ(cuCheckpointProcessRestore(c.pid, &args), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_SUCCESS);
  // This process numbers the GPUs as before: the memory moved between them.
  EXPECT_EQ(used_on(0), kOnOrdinal1);
  EXPECT_EQ(used_on(1), kOnOrdinal0);
  c.command.send('V');
  EXPECT_EQ(wait_child(c.pid), 0);
}

// Lock waits for calls in flight (CUDA_ERROR_TIMEOUT when they outlast timeoutMs, the process
// left RUNNING), and a locked process's further driver calls wait until unlock.
TEST(SimcudaCheckpoint, LockWaitsForCallsInFlightAndBlocksNewOnes) {
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    setenv("SIMCUDA_DELAYS", "cuCtxSynchronize:3000", 1);
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUcontext ctx = nullptr;
    cuCtxGetCurrent(&ctx);
    // In flight must mean the long call: a call counted while cuCtxSetCurrent was in flight
    // let the 50 ms lock below succeed, and the test then waited for ever (seen under load).
    std::atomic<bool> synchronizing{false};
    std::thread busy([ctx, &synchronizing] {
      cuCtxSetCurrent(ctx);
      synchronizing = true;
      cuCtxSynchronize();  // an application thread busy in a long call
    });
    while (!synchronizing || simcuda_test_calls_in_flight() == 0) std::this_thread::yield();
    reply.send('B');
    if (command.receive() != 'X') return 20;
    std::thread later([&reply] {
      int count = 0;
      cuDeviceGetCount(&count);  // waits at the gate while locked
      reply.send('D');
    });
    char next = command.receive();
    busy.join();
    later.join();
    return next == 'E' ? 0 : 21;
  });
  ASSERT_EQ(c.reply.receive(), 'B');
  CUcheckpointLockArgs quick{};
  quick.timeoutMs = 50;
  EXPECT_EQ(cuCheckpointProcessLock(c.pid, &quick), CUDA_ERROR_TIMEOUT);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_RUNNING);
  ASSERT_EQ(cuCheckpointProcessLock(c.pid, nullptr), CUDA_SUCCESS);  // no timeout: waits the call out
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_LOCKED);
  c.command.send('X');
  pollfd pfd{c.reply.fds[0], POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 300), 0) << "a driver call ran while the process was locked";
  ASSERT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(c.reply.receive(), 'D');
  c.command.send('E');
  EXPECT_EQ(wait_child(c.pid), 0);
}

}  // namespace

namespace {

// Like the real driver, cuCheckpointProcessLock waits for the work queued on the process's
// streams: a kernel that never finishes (wait_u32 on a word nobody writes) makes the lock
// time out with the process left running; once the word is written the work ends and the
// lock succeeds.
TEST(SimcudaCheckpoint, LockWaitsForStreamWorkAndTimesOutWhileItRuns) {
  Child c;
  c.start([](const Pipe &command, const Pipe &reply) {
    Owner o;
    if (int e = o.setup(false, 3)) return e;
    if (cuMemsetD32_v2(o.va, 0, 1) != CUDA_SUCCESS) return 13;
    CUstream stream = nullptr;
    CUmodule module = nullptr;
    CUfunction wait = nullptr;
    if (cuStreamCreate(&stream, 0) != CUDA_SUCCESS || cuModuleLoadData(&module, "simcuda:builtin") != CUDA_SUCCESS ||
        cuModuleGetFunction(&wait, module, "wait_u32") != CUDA_SUCCESS) {
      return 14;
    }
    CUdeviceptr word = o.va;
    unsigned value = 1;
    void *params[] = {&word, &value};
    if (cuLaunchKernel(wait, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS) return 15;
    reply.send('R');
    if (command.receive() != 'W') return 20;
    if (cuMemsetD32_v2(o.va, 1, 1) != CUDA_SUCCESS) return 21;  // the peer's write
    reply.send('W');
    if (command.receive() != 'V') return 22;
    return cuStreamSynchronize(stream) == CUDA_SUCCESS ? 0 : 23;
  });
  ASSERT_EQ(c.reply.receive(), 'R');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcheckpointLockArgs lock{};
  lock.timeoutMs = 300;
  EXPECT_EQ(cuCheckpointProcessLock(c.pid, &lock), CUDA_ERROR_TIMEOUT);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_RUNNING);
  c.command.send('W');
  ASSERT_EQ(c.reply.receive(), 'W');
  lock.timeoutMs = 10000;
  ASSERT_EQ(cuCheckpointProcessLock(c.pid, &lock), CUDA_SUCCESS);
  EXPECT_EQ(state_of(c.pid), CU_PROCESS_STATE_LOCKED);
  ASSERT_EQ(cuCheckpointProcessUnlock(c.pid, nullptr), CUDA_SUCCESS);
  c.command.send('V');
  EXPECT_EQ(wait_child(c.pid), 0);
}

}  // namespace
