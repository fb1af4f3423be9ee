// Legacy CUDA IPC on the simulated driver, native only (no shim): cuIpcGetMemHandle /
// cuIpcOpenMemHandle / cuIpcCloseMemHandle and IPC events between processes, what
// cuPointerGetAttribute(s) say about cuMemAlloc memory, and DRIVER-FACTS F11 (an importer that
// holds opened IPC memory at a native checkpoint cannot be restored: INVALID_VALUE, stuck
// CHECKPOINTED) and F15 (opened IPC events work on after a native cycle). Children are forked
// before this process calls cuInit and driven over pipes; the 64-byte handles travel over a pipe.
#include <signal.h>

#include <cstring>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

constexpr size_t kSize = 4 * kGranularity;  // 8 MiB

// The 64 bytes of a handle over a pipe.
template <typename Handle>
bool send_handle(const Pipe &pipe, const Handle &handle) {
  return write(pipe.fds[1], &handle, sizeof handle) == static_cast<ssize_t>(sizeof handle);
}
template <typename Handle>
bool receive_handle(const Pipe &pipe, Handle *handle) {
  return read(pipe.fds[0], handle, sizeof *handle) == static_cast<ssize_t>(sizeof *handle);
}

// A child on device 0 that cuMemAllocs kSize bytes with pattern `seed` and sends its IPC handle
// (taken at an interior pointer: it names the whole allocation) on `handles`.
int ipc_creator(const Pipe &handles, unsigned seed, CUdeviceptr *ptr) {
  if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
  if (cuMemAlloc_v2(ptr, kSize) != CUDA_SUCCESS || !fill_pattern(*ptr, kSize, seed)) return 11;
  CUipcMemHandle handle{};
  if (cuIpcGetMemHandle(&handle, *ptr + 4096) != CUDA_SUCCESS) return 12;
  CUdeviceptr mine = 0;
  if (cuIpcOpenMemHandle_v2(&mine, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_ERROR_INVALID_CONTEXT) return 13;
  return send_handle(handles, handle) ? 0 : 14;
}

TEST(SimcudaIpc, OpenedMemorySharesBytesAndFollowsTheDriverRules) {
  Pipe handles;
  Child creator, opener;
  creator.start([&](const Pipe &command, const Pipe &reply) {
    CUdeviceptr ptr = 0;
    if (int e = ipc_creator(handles, 7, &ptr)) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    unsigned word = 0;  // the opener wrote 0xfeedf00d at byte 64
    if (cuMemcpyDtoH_v2(&word, ptr + 64, sizeof word) != CUDA_SUCCESS || word != 0xfeedf00du) return 21;
    return cuMemFree_v2(ptr) == CUDA_SUCCESS ? 0 : 22;
  });
  opener.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    CUipcMemHandle handle{};
    if (!receive_handle(handles, &handle)) return 11;
    CUdeviceptr a = 0, b = 0;
    if (cuIpcOpenMemHandle_v2(&a, handle, 2) != CUDA_ERROR_INVALID_VALUE) return 12;  // unknown flag
    if (cuIpcOpenMemHandle_v2(&a, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return 13;
    if (cuIpcOpenMemHandle_v2(&b, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS || b != a) return 14;
    if (!has_pattern(a, kSize, 7)) return 15;
    CUdeviceptr base = 0;
    size_t size = 0;
    if (cuMemGetAddressRange_v2(&base, &size, a + 100) != CUDA_SUCCESS || base != a || size != kSize) return 16;
    CUipcMemHandle again{};
    if (cuIpcGetMemHandle(&again, a) != CUDA_ERROR_INVALID_VALUE) return 17;  // not this process's cuMemAlloc
    if (cuMemFree_v2(a) != CUDA_ERROR_INVALID_VALUE) return 18;
    const unsigned word = 0xfeedf00du;
    if (cuMemcpyHtoD_v2(a + 64, &word, sizeof word) != CUDA_SUCCESS) return 19;
    if (cuIpcCloseMemHandle(a + 4096) != CUDA_ERROR_INVALID_VALUE) return 20;
    if (cuIpcCloseMemHandle(a) != CUDA_SUCCESS || cuIpcCloseMemHandle(a) != CUDA_SUCCESS) return 21;
    if (cuIpcCloseMemHandle(a) != CUDA_ERROR_INVALID_VALUE) return 22;  // every open closed
    if (cuMemGetAddressRange_v2(&base, &size, a) != CUDA_ERROR_NOT_FOUND) return 23;
    reply.send('C');
    return command.receive() == 'Q' ? 0 : 24;
  });
  ASSERT_EQ(creator.reply.receive(), 'R');
  ASSERT_EQ(opener.reply.receive(), 'C');
  creator.command.send('V');
  EXPECT_EQ(wait_child(creator.pid), 0);
  opener.command.send('Q');
  EXPECT_EQ(wait_child(opener.pid), 0);
}

// F11: lock and checkpoint succeed on both, the creator restores, the opener's restore fails
// CUDA_ERROR_INVALID_VALUE and it stays CHECKPOINTED; its unlock fails 401: stuck.
TEST(SimcudaIpc, F11OpenerHoldingIpcMemoryIsStuckCheckpointed) {
  Pipe handles;
  Child creator, opener;
  creator.start([&](const Pipe &command, const Pipe &reply) {
    CUdeviceptr ptr = 0;
    if (int e = ipc_creator(handles, 11, &ptr)) return e;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    return has_pattern(ptr, kSize, 11) ? 0 : 21;
  });
  opener.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    CUipcMemHandle handle{};
    CUdeviceptr ptr = 0;
    if (!receive_handle(handles, &handle)) return 11;
    if (cuIpcOpenMemHandle_v2(&ptr, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS) return 12;
    if (!has_pattern(ptr, kSize, 11)) return 13;
    reply.send('M');
    command.receive();  // never comes: the test kills this process
    return 0;
  });
  ASSERT_EQ(creator.reply.receive(), 'R');
  ASSERT_EQ(opener.reply.receive(), 'M');
  ASSERT_NO_FATAL_FAILURE(expect_importer_stuck(creator.pid, opener.pid, CUDA_ERROR_INVALID_VALUE));
  end_stuck_pair(creator, opener);
}

// F15: an interprocess event opened by a second process works on both sides before and after a
// native cycle of both.
TEST(SimcudaIpc, F15OpenedIpcEventWorksAfterNativeCycle) {
  Pipe handles;
  Child creator, opener;
  creator.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUevent event = nullptr, timed = nullptr;
    if (cuEventCreate(&timed, CU_EVENT_INTERPROCESS) != CUDA_ERROR_INVALID_VALUE) return 11;  // must not time
    if (cuEventCreate(&timed, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return 12;
    CUipcEventHandle handle{};
    if (cuIpcGetEventHandle(&handle, timed) != CUDA_ERROR_INVALID_VALUE) return 13;
    if (cuEventCreate(&event, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return 14;
    if (cuIpcGetEventHandle(&handle, event) != CUDA_SUCCESS || !send_handle(handles, handle)) return 15;
    for (char round : {'1', '2'}) {
      if (command.receive() != round) return 16;
      CUstream stream = nullptr;
      if (cuStreamCreate(&stream, 0) != CUDA_SUCCESS || cuEventRecord(event, stream) != CUDA_SUCCESS) return 17;
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS || cuStreamDestroy_v2(stream) != CUDA_SUCCESS) return 18;
      reply.send(round);
    }
    return command.receive() == 'Q' ? 0 : 19;
  });
  opener.start([&](const Pipe &command, const Pipe &reply) {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    CUipcEventHandle handle{};
    CUevent event = nullptr;
    if (!receive_handle(handles, &handle) || cuIpcOpenEventHandle(&event, handle) != CUDA_SUCCESS) return 11;
    for (char round : {'1', '2'}) {
      if (command.receive() != round) return 12;
      CUstream stream = nullptr;
      if (cuStreamCreate(&stream, 0) != CUDA_SUCCESS || cuStreamWaitEvent(stream, event, 0) != CUDA_SUCCESS) return 13;
      if (cuStreamSynchronize(stream) != CUDA_SUCCESS || cuEventSynchronize(event) != CUDA_SUCCESS) return 14;
      if (cuEventQuery(event) != CUDA_SUCCESS || cuStreamDestroy_v2(stream) != CUDA_SUCCESS) return 15;
      reply.send(round);
    }
    return cuEventDestroy_v2(event) == CUDA_SUCCESS ? 0 : 16;
  });
  creator.command.send('1');
  ASSERT_EQ(creator.reply.receive(), '1');
  opener.command.send('1');
  ASSERT_EQ(opener.reply.receive(), '1');
  for (pid_t pid : {creator.pid, opener.pid}) ASSERT_EQ(cuCheckpointProcessLock(pid, nullptr), CUDA_SUCCESS);
  for (pid_t pid : {creator.pid, opener.pid}) ASSERT_EQ(cuCheckpointProcessCheckpoint(pid, nullptr), CUDA_SUCCESS);
  for (pid_t pid : {creator.pid, opener.pid}) ASSERT_EQ(cuCheckpointProcessRestore(pid, nullptr), CUDA_SUCCESS);
  for (pid_t pid : {creator.pid, opener.pid}) ASSERT_EQ(cuCheckpointProcessUnlock(pid, nullptr), CUDA_SUCCESS);
  creator.command.send('2');
  ASSERT_EQ(creator.reply.receive(), '2');
  opener.command.send('2');
  ASSERT_EQ(opener.reply.receive(), '2');
  EXPECT_EQ(wait_child(opener.pid), 0);
  creator.command.send('Q');
  EXPECT_EQ(wait_child(creator.pid), 0);
}

// What cuPointerGetAttribute(s) say about cuMemAlloc memory, VMM memory and host memory.
TEST(SimcudaIpc, PointerAttributesOfMallocVmmAndHostMemory) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  ASSERT_NE(use_device(1), nullptr);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, 3000), CUDA_SUCCESS);
  EXPECT_EQ(ptr % kGranularity, 0u);
  unsigned legacy = 9, mapped = 9, type = 0;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t range = 0;
  unsigned long long handle_types = 9, buffer = 0;
  EXPECT_EQ(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr + 10), CUDA_SUCCESS);
  EXPECT_EQ(legacy, 1u);
  EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr + 10), CUDA_SUCCESS);
  EXPECT_EQ(start, ptr);
  EXPECT_EQ(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, ptr + 10), CUDA_SUCCESS);
  EXPECT_EQ(range, kGranularity);
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr), CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(cuPointerGetAttribute(&handle_types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, ptr), CUDA_SUCCESS);
  EXPECT_EQ(handle_types, 0u);
  void *host = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, ptr), CUDA_ERROR_INVALID_VALUE);

  CUmemAllocationProp prop = device_prop(1, true);
  CUmemGenericAllocationHandle vmm = 0;
  ASSERT_EQ(cuMemCreate(&vmm, kGranularity, &prop, 0), CUDA_SUCCESS);
  const CUdeviceptr va = map_rw(vmm, kGranularity, 1);
  ASSERT_NE(va, 0u);
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *data[] = {&legacy, &mapped, &handle_types, &buffer};
  ASSERT_EQ(cuPointerGetAttributes(4, which, data, va), CUDA_SUCCESS);
  EXPECT_EQ(legacy, 0u);
  EXPECT_EQ(mapped, 1u);
  EXPECT_EQ(handle_types, static_cast<unsigned long long>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_NE(buffer, 0u);
  CUipcMemHandle handle{};
  EXPECT_EQ(cuIpcGetMemHandle(&handle, va), CUDA_ERROR_INVALID_VALUE);  // VMM memory has no legacy IPC

  int on_stack = 0;  // host memory: cuPointerGetAttribute fails, cuPointerGetAttributes zeroes
  const auto host_ptr = reinterpret_cast<CUdeviceptr>(&on_stack);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host_ptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuPointerGetAttributes(4, which, data, host_ptr), CUDA_SUCCESS);
  EXPECT_EQ(mapped, 0u);
  EXPECT_EQ(buffer, 0u);
  EXPECT_EQ(cuIpcGetMemHandle(&handle, host_ptr), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr pitched = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 3, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(cuMemFree_v2(pitched + 512), CUDA_ERROR_INVALID_VALUE);  // not the base
  EXPECT_EQ(cuMemFree_v2(pitched), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(ptr), CUDA_SUCCESS);
}

}  // namespace
