// Helpers for the simulated-driver tests (simcuda_*_test.cc, in tests/unit and
// tests/integration): the driver API in internal mode (every versioned name as itself), a
// private SIMCUDA_DIR per test process, child processes with pipe handshakes, and
// descriptor passing.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "common/socket.h"
#include "simcuda/cuda_api.h"  // internal-API mode, and the entry points newer than the headers
#include "simcuda/introspection.h"

namespace simcuda_test {

inline constexpr size_t kGranularity = size_t{2} << 20;

// Gives this test process (and its children) a SIMCUDA_DIR of its own, so the memory ledger
// and service sockets of tests running in parallel never meet; removed at exit.
struct PrivateDir {
  PrivateDir() {
    char tmpl[] = "/tmp/simcuda-test-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    path = tmpl;
    owner = getpid();
    setenv("SIMCUDA_DIR", tmpl, 1);
  }
  ~PrivateDir() {
    if (getpid() == owner) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
  std::string path;
  pid_t owner;
};
inline PrivateDir private_dir;

// A one-byte-at-a-time pipe handshake between a parent and a forked child.
struct Pipe {
  Pipe() {
    if (pipe2(fds, O_CLOEXEC) != 0) std::abort();
  }
  ~Pipe() {
    close(fds[0]);
    close(fds[1]);
  }
  void send(char c) const { ASSERT_EQ(write(fds[1], &c, 1), 1); }
  char receive() const {
    char c = 0;
    return read(fds[0], &c, 1) == 1 ? c : '\0';
  }
  int fds[2];
};

// A connected socket pair for SCM_RIGHTS (common/socket.h's packets).
struct SocketPair {
  SocketPair() {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2];
};

// Bound on waiting for a descriptor from the other process, ms (the suite runs under ASan on
// a loaded 2-core machine; a test times out after 120 s).
inline constexpr int kDescriptorWaitMs = 60'000;

// Sends `fd` over `socket` with a one-byte packet.
inline void send_fd(int socket, int fd) {
  const char byte = 'F';
  const cusnap::Status sent =
      cusnap::SendPacket(socket, &byte, 1, fd, cusnap::Deadline::AfterMs(kDescriptorWaitMs));
  ASSERT_TRUE(sent.ok()) << sent.error().message;
}

// The descriptor that came with the next packet on `socket` (the caller owns it), or -1.
inline int receive_fd(int socket) {
  char byte = 0;
  int fd = -1;
  const auto got =
      cusnap::RecvPacket(socket, &byte, 1, &fd, cusnap::Deadline::AfterMs(kDescriptorWaitMs));
  return got.ok() ? fd : -1;
}

// Runs `body` in a forked child that exits with body's return value (never returns there).
inline pid_t fork_child(const std::function<int()> &body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

// Waits for a child and returns its exit status (-1 if it did not exit normally).
inline int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Properties of a device allocation, optionally exportable as a POSIX descriptor.
inline CUmemAllocationProp device_prop(int device, bool posix) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  prop.requestedHandleTypes = posix ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

// Reserves a range and maps `handle` there read-write for `device`.
inline CUdeviceptr map_rw(CUmemGenericAllocationHandle handle, size_t size, int device) {
  CUdeviceptr va = 0;
  if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS) return 0;
  if (cuMemMap(va, size, 0, handle, 0) != CUDA_SUCCESS) return 0;
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cuMemSetAccess(va, size, &access, 1) != CUDA_SUCCESS) return 0;
  return va;
}

// Makes the primary context of `device` current on this thread.
inline CUcontext use_device(int device) {
  CUcontext ctx = nullptr;
  if (cuDevicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS) return nullptr;
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

// Fills `size` bytes at `va` with a pattern derived from `seed`, through the driver.
inline bool fill_pattern(CUdeviceptr va, size_t size, unsigned seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return cuMemcpyHtoD_v2(va, bytes.data(), size) == CUDA_SUCCESS;
}

// True when `size` bytes at `va` hold the pattern of `seed` (read through the driver).
inline bool has_pattern(CUdeviceptr va, size_t size, unsigned seed) {
  std::string bytes(size, '\0');
  if (cuMemcpyDtoH_v2(bytes.data(), va, size) != CUDA_SUCCESS) return false;
  for (size_t i = 0; i < size; ++i)
    if (bytes[i] != static_cast<char>((i * 131 + seed) & 0xff)) return false;
  return true;
}

// A forked child driven by single-byte commands; replies come back the same way.
struct Child {
  Pipe command, reply;
  pid_t pid = -1;
  template <typename Body>
  void start(Body body) {
    pid = fork_child([&] { return body(command, reply); });
  }
};

// The checkpoint state the driver reports for `pid` (CU_PROCESS_STATE_FAILED when it fails).
inline CUprocessState state_of(pid_t pid) {
  CUprocessState state = CU_PROCESS_STATE_FAILED;
  EXPECT_EQ(cuCheckpointProcessGetState(pid, &state), CUDA_SUCCESS);
  return state;
}

// The trap of DRIVER-FACTS F5 and F11: lock and checkpoint succeed on both processes, the
// owner's restore and unlock succeed, the importer's restore fails `expected` and it stays
// CHECKPOINTED for good (unlock CUDA_ERROR_ILLEGAL_STATE, restore again `expected`).
inline void expect_importer_stuck(pid_t owner, pid_t importer, CUresult expected) {
  ASSERT_EQ(cuCheckpointProcessLock(owner, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(importer, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(owner, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(importer, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessRestore(owner, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCheckpointProcessRestore(importer, nullptr), expected);
  EXPECT_EQ(state_of(importer), CU_PROCESS_STATE_CHECKPOINTED);
  EXPECT_EQ(cuCheckpointProcessUnlock(importer, nullptr), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(static_cast<int>(CUDA_ERROR_ILLEGAL_STATE), 401);
  EXPECT_EQ(cuCheckpointProcessRestore(importer, nullptr), expected);  // for ever
  EXPECT_EQ(state_of(importer), CU_PROCESS_STATE_CHECKPOINTED);
  ASSERT_EQ(cuCheckpointProcessUnlock(owner, nullptr), CUDA_SUCCESS);
}

// After expect_importer_stuck: the owner is told to verify ('V') and exits 0; the stuck
// importer can only be killed.
inline void end_stuck_pair(const Child& owner, const Child& importer) {
  owner.command.send('V');
  EXPECT_EQ(wait_child(owner.pid), 0);
  kill(importer.pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(importer.pid, &status, 0), importer.pid);
  EXPECT_TRUE(WIFSIGNALED(status));
}

}  // namespace simcuda_test
