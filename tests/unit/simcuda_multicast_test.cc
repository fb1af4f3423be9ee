// Multicast objects on the simulated driver, in one process: argument checks, binds that wait
// for the whole team, both bind ABIs, unbind, mapping the object, release, shareable-memory
// rules, the all-reduce hook, fault injection on every multicast entry point, and (in children
// with their own environment) bind timeouts and capacity rounding.
#include <thread>
#include <vector>

#include <functional>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

class SimcudaMulticast : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
  static CUmulticastObjectProp prop(unsigned devices, size_t size) {
    CUmulticastObjectProp p{};
    p.numDevices = devices;
    p.size = size;
    p.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
  }
};

TEST_F(SimcudaMulticast, CreateChecksArguments) {
  CUmemGenericAllocationHandle mc = 0;
  CUmulticastObjectProp p = prop(2, kGranularity);
  EXPECT_EQ(cuMulticastCreate(nullptr, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastCreate(&mc, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUmulticastObjectProp too_many = prop(3, kGranularity);
  EXPECT_EQ(cuMulticastCreate(&mc, &too_many), CUDA_ERROR_INVALID_VALUE);
  CUmulticastObjectProp unaligned = prop(2, kGranularity + 1);
  EXPECT_EQ(cuMulticastCreate(&mc, &unaligned), CUDA_ERROR_INVALID_VALUE);
  size_t granularity = 0;
  ASSERT_EQ(cuMulticastGetGranularity(&granularity, &p, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(granularity, kGranularity);
  ASSERT_EQ(cuMulticastGetGranularity(&granularity, &p, CU_MULTICAST_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(granularity, size_t{512} << 20);
  EXPECT_EQ(cuMulticastGetGranularity(nullptr, &p, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 5), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastAddDevice(0x77, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_ERROR_INVALID_VALUE);  // already in the team
  ASSERT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimcudaMulticast, BindWaitsForTheWholeTeam) {
  CUmemGenericAllocationHandle mc = 0;
  CUmulticastObjectProp p = prop(2, 2 * kGranularity);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  CUmemGenericAllocationHandle mem[2] = {};
  for (int d = 0; d < 2; ++d) {
    CUmemAllocationProp a = device_prop(d, true);
    ASSERT_EQ(cuMemCreate(&mem[d], 2 * kGranularity, &a, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  Pipe bound;
  std::thread binder([&] {
    // Device 1 is not in the team yet: this bind waits until it is.
    EXPECT_EQ(cuMulticastBindMem(mc, 0, mem[0], 0, 2 * kGranularity, 0), CUDA_SUCCESS);
    bound.send('B');
  });
  ASSERT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);
  EXPECT_EQ(bound.receive(), 'B');
  binder.join();
  // The device-explicit ABI; memory must live on the named device.
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 0, mem[1], 0, 2 * kGranularity, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 1, 0, mem[1], 0, 4 * kGranularity, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastBindMem_v2(mc, 1, 0, mem[1], 0, 2 * kGranularity, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, mem[0], 0, kGranularity, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps
  EXPECT_EQ(cuMulticastUnbind(mc, 0, 0, kGranularity), CUDA_ERROR_INVALID_VALUE);  // not that binding
  ASSERT_EQ(cuMulticastUnbind(mc, 0, 0, 2 * kGranularity), CUDA_SUCCESS);
  // Rebind device 0 by address: v1 binds for the current context's device.
  CUdeviceptr va = map_rw(mem[0], 2 * kGranularity, 0);
  ASSERT_NE(va, 0u);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_NE(use_device(1), nullptr);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_ERROR_INVALID_DEVICE);  // memory is on 0
  ASSERT_NE(use_device(0), nullptr);
  ASSERT_EQ(cuMulticastBindAddr(mc, 0, va, 2 * kGranularity, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastUnbind(mc, 0, 0, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastBindAddr_v2(mc, 0, 0, va, 2 * kGranularity, 0), CUDA_SUCCESS);
  // The multicast object maps like an allocation.
  CUdeviceptr mc_va = map_rw(mc, 2 * kGranularity, 0);
  ASSERT_NE(mc_va, 0u);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void *>(mc_va)), CUDA_SUCCESS);
  EXPECT_EQ(retained, mc);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(mc_va, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastUnbind(mc, 1, 0, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // object gone
}

CUmulticastObjectProp object_prop(unsigned devices, size_t size, bool shareable = true) {
  CUmulticastObjectProp p{};
  p.numDevices = devices;
  p.size = size;
  p.handleTypes = shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
  return p;
}

TEST_F(SimcudaMulticast, ShareableObjectsBindOnlyShareableMemory) {
  CUmemGenericAllocationHandle shared = 0, local = 0, posix = 0, plain = 0;
  CUmulticastObjectProp p = object_prop(1, kGranularity), q = object_prop(1, kGranularity, false);
  ASSERT_EQ(cuMulticastCreate(&shared, &p), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastCreate(&local, &q), CUDA_SUCCESS);
  CUmemAllocationProp a = device_prop(0, true), b = device_prop(0, false);
  ASSERT_EQ(cuMemCreate(&posix, kGranularity, &a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&plain, kGranularity, &b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastAddDevice(shared, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastAddDevice(local, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(local, 1), CUDA_ERROR_INVALID_VALUE);  // team full
  EXPECT_EQ(cuMulticastBindMem(shared, 0, plain, 0, kGranularity, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(shared, 0, posix, 0, kGranularity, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(local, 0, plain, 0, kGranularity, 0), CUDA_SUCCESS);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, local, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  // Properties: no location, the requested handle types.
  CUmemAllocationProp prop{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&prop, shared), CUDA_SUCCESS);
  EXPECT_EQ(prop.location.type, CU_MEM_LOCATION_TYPE_INVALID);
  EXPECT_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  // A member without a descriptor has no data path for the all-reduce hook.
  EXPECT_EQ(simcuda_test_multimem_all_reduce(local, 0, kGranularity, SIMCUDA_MULTIMEM_U32), CUDA_ERROR_NOT_SUPPORTED);
  for (CUmemGenericAllocationHandle h : {shared, local, posix, plain}) EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_test_allocation_count(), 0u);
}

TEST_F(SimcudaMulticast, AllReduceSumsEveryDevicesMember) {
  CUmemGenericAllocationHandle mc = 0, mem[2] = {};
  CUmulticastObjectProp p = object_prop(2, 2 * kGranularity);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  CUdeviceptr va[2] = {};
  ASSERT_NE(use_device(0), nullptr);  // copies need a current context
  for (int d = 0; d < 2; ++d) {
    CUmemAllocationProp a = device_prop(d, true);
    ASSERT_EQ(cuMemCreate(&mem[d], 2 * kGranularity, &a, 0), CUDA_SUCCESS);
    va[d] = map_rw(mem[d], 2 * kGranularity, d);
    ASSERT_NE(va[d], 0u);
    std::vector<uint32_t> words(2 * kGranularity / 4);
    for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(i * (d + 1));
    ASSERT_EQ(cuMemcpyHtoD_v2(va[d], words.data(), 2 * kGranularity), CUDA_SUCCESS);
    ASSERT_EQ(cuMulticastAddDevice(mc, d), CUDA_SUCCESS);
  }
  // Device 0 binds its second 2 MiB at multicast offset 0; device 1 its first.
  ASSERT_EQ(cuMulticastBindMem(mc, 0, mem[0], kGranularity, kGranularity, 0), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_test_multimem_all_reduce(mc, 0, kGranularity, SIMCUDA_MULTIMEM_U32), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMulticastBindMem_v2(mc, 1, 0, mem[1], 0, kGranularity, 0), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_test_multimem_all_reduce(mc, 0, kGranularity + 4, SIMCUDA_MULTIMEM_U32), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(simcuda_test_multimem_all_reduce(mc, 2, 8, SIMCUDA_MULTIMEM_U32), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(simcuda_test_multimem_all_reduce(mc, 64, 1024, SIMCUDA_MULTIMEM_U32), CUDA_SUCCESS);
  std::vector<uint32_t> got0(kGranularity / 4), got1(kGranularity / 4);
  ASSERT_EQ(cuMemcpyDtoH_v2(got0.data(), va[0] + kGranularity, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(got1.data(), va[1], kGranularity), CUDA_SUCCESS);
  const size_t base = kGranularity / 4;  // device 0's member starts at its word `base`
  for (size_t i = 0; i < got0.size(); ++i) {
    bool reduced = i >= 16 && i < 16 + 256;
    uint32_t sum = static_cast<uint32_t>((base + i) + 2 * i);
    ASSERT_EQ(got0[i], reduced ? sum : static_cast<uint32_t>(base + i)) << i;
    ASSERT_EQ(got1[i], reduced ? sum : static_cast<uint32_t>(2 * i)) << i;
  }
  simcuda_multicast_binding b[2] = {};
  ASSERT_EQ(simcuda_test_multicast_bindings(mc, b, 2), 2u);
  EXPECT_EQ(b[0].device, 0);
  EXPECT_EQ(b[0].allocation_offset, kGranularity);
  EXPECT_EQ(b[1].device, 1);
  EXPECT_EQ(b[1].pid, getpid());
}

TEST_F(SimcudaMulticast, FaultsReachEveryMulticastEntryPoint) {
  constexpr CUresult kFault = CUDA_ERROR_NOT_PERMITTED;
  CUmemGenericAllocationHandle mc = 0, mem = 0;
  CUmulticastObjectProp p = object_prop(1, kGranularity);
  simcuda_test_inject_fault("cuMulticastCreate", 1, kFault);
  EXPECT_EQ(cuMulticastCreate(&mc, &p), kFault);
  EXPECT_EQ(simcuda_test_allocation_count(), 0u);
  ASSERT_EQ(cuMulticastCreate(&mc, &p), CUDA_SUCCESS);
  size_t granularity = 0;
  simcuda_test_inject_fault("cuMulticastGetGranularity", 1, kFault);
  EXPECT_EQ(cuMulticastGetGranularity(&granularity, &p, CU_MULTICAST_GRANULARITY_MINIMUM), kFault);
  EXPECT_EQ(granularity, 0u);
  simcuda_test_inject_fault("cuMulticastAddDevice", 1, kFault);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), kFault);
  simcuda_multicast_info info{};
  ASSERT_EQ(simcuda_test_multicast_info(mc, &info), 0);
  EXPECT_EQ(info.devices_added, 0u);
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  CUmemAllocationProp a = device_prop(0, true);
  ASSERT_EQ(cuMemCreate(&mem, kGranularity, &a, 0), CUDA_SUCCESS);
  CUdeviceptr va = map_rw(mem, kGranularity, 0);
  ASSERT_NE(va, 0u);
  ASSERT_NE(use_device(0), nullptr);
  // Each ABI of a name counts toward that name.
  struct Bind {
    const char *api_name;
    std::function<CUresult()> call;
  } binds[] = {
      {"cuMulticastBindMem", [&] { return cuMulticastBindMem(mc, 0, mem, 0, kGranularity, 0); }},
      {"cuMulticastBindMem", [&] { return cuMulticastBindMem_v2(mc, 0, 0, mem, 0, kGranularity, 0); }},
      {"cuMulticastBindAddr", [&] { return cuMulticastBindAddr(mc, 0, va, kGranularity, 0); }},
      {"cuMulticastBindAddr", [&] { return cuMulticastBindAddr_v2(mc, 0, 0, va, kGranularity, 0); }},
  };
  for (const Bind &bind : binds) {
    simcuda_test_inject_fault(bind.api_name, 1, kFault);
    EXPECT_EQ(bind.call(), kFault) << bind.api_name;
    ASSERT_EQ(simcuda_test_multicast_info(mc, &info), 0);
    EXPECT_EQ(info.bindings, 0u) << bind.api_name;
    ASSERT_EQ(bind.call(), CUDA_SUCCESS) << bind.api_name;
    simcuda_test_inject_fault("cuMulticastUnbind", 1, kFault);
    EXPECT_EQ(cuMulticastUnbind(mc, 0, 0, kGranularity), kFault);
    ASSERT_EQ(simcuda_test_multicast_info(mc, &info), 0);
    EXPECT_EQ(info.bindings, 1u);
    ASSERT_EQ(cuMulticastUnbind(mc, 0, 0, kGranularity), CUDA_SUCCESS);
  }
}

// In a child with its own environment (this process never initialises the driver).
int in_child(const char *variable, const char *value, const std::function<int()> &body) {
  pid_t pid = fork_child([&] {
    if (variable != nullptr) setenv(variable, value, 1);
    return cuInit(0) == CUDA_SUCCESS ? body() : 100;
  });
  return wait_child(pid);
}

TEST(SimcudaMulticastAlone, BindAndMapTimeOutOnAnIncompleteTeam) {
  EXPECT_EQ(in_child("SIMCUDA_MULTICAST_BIND_TIMEOUT_MS", "20", [] {
              CUmemGenericAllocationHandle mc = 0, mem = 0;
              CUmulticastObjectProp p = object_prop(2, kGranularity);
              CUmemAllocationProp a = device_prop(0, true);
              if (cuMulticastCreate(&mc, &p) != CUDA_SUCCESS || cuMemCreate(&mem, kGranularity, &a, 0) != CUDA_SUCCESS) return 1;
              if (cuMulticastAddDevice(mc, 0) != CUDA_SUCCESS) return 2;
              if (cuMulticastBindMem(mc, 0, mem, 0, kGranularity, 0) != CUDA_ERROR_TIMEOUT) return 3;
              CUdeviceptr va = 0;
              if (cuMemAddressReserve(&va, kGranularity, 0, 0, 0) != CUDA_SUCCESS) return 4;
              if (cuMemMap(va, kGranularity, 0, mc, 0) != CUDA_ERROR_TIMEOUT) return 5;
              simcuda_multicast_info info{};
              if (simcuda_test_multicast_info(mc, &info) != 0 || info.bindings != 0) return 6;
              // Once the team is complete both succeed.
              if (cuMulticastAddDevice(mc, 1) != CUDA_SUCCESS) return 7;
              if (cuMulticastBindMem(mc, 0, mem, 0, kGranularity, 0) != CUDA_SUCCESS) return 8;
              return cuMemMap(va, kGranularity, 0, mc, 0) == CUDA_SUCCESS ? 0 : 9;
            }),
            0);
}

// Rounding on: the object reports its requested 2 MiB but binds and maps up to 8 MiB succeed
// (as on r615 drivers, SPEC-REFERENCE A.2 #5). Rounding off: the same calls are refused.
int bind_and_map_past_requested_size(bool rounding) {
  CUmemGenericAllocationHandle mc = 0, mem = 0;
  CUmulticastObjectProp p = object_prop(1, kGranularity);
  CUmemAllocationProp a = device_prop(0, true);
  if (cuMulticastCreate(&mc, &p) != CUDA_SUCCESS || cuMemCreate(&mem, 4 * kGranularity, &a, 0) != CUDA_SUCCESS) return 1;
  simcuda_multicast_info info{};
  if (simcuda_test_multicast_info(mc, &info) != 0 || info.size != kGranularity) return 2;
  if (info.capacity != (rounding ? 4 : 1) * kGranularity) return 3;
  if (cuMulticastAddDevice(mc, 0) != CUDA_SUCCESS) return 4;
  CUresult expected = rounding ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (cuMulticastBindMem(mc, kGranularity, mem, 0, 3 * kGranularity, 0) != expected) return 5;
  if (cuMulticastBindMem(mc, 0, mem, 0, 5 * kGranularity, 0) != CUDA_ERROR_INVALID_VALUE) return 6;  // past the capacity
  CUdeviceptr va = 0;
  if (cuMemAddressReserve(&va, 4 * kGranularity, 0, 0, 0) != CUDA_SUCCESS) return 7;
  if (cuMemMap(va, 4 * kGranularity, 0, mc, 0) != expected) return 8;
  return 0;
}

TEST(SimcudaMulticastAlone, CapacityRoundingAcceptsBindsAndMapsPastTheRequestedSize) {
  EXPECT_EQ(in_child("SIMCUDA_MULTICAST_ROUND_BYTES", "8388608", [] { return bind_and_map_past_requested_size(true); }), 0);
  EXPECT_EQ(in_child(nullptr, nullptr, [] { return bind_and_map_past_requested_size(false); }), 0);
  EXPECT_EQ(in_child("SIMCUDA_MULTICAST_ROUND_BYTES", "1000", [] { return 0; }), 100);  // not a 2 MiB multiple
}

}  // namespace
