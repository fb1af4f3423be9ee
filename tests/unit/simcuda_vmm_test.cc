// Virtual memory management on the simulated driver, in one process: allocations, reservations,
// mappings, access, retain, properties, HOST_NUMA, device malloc, copies, host memory and the
// error codes for bad arguments (CUDA Driver API, "Virtual Memory Management").
#include <gmock/gmock.h>
#include <sys/mman.h>

#include "simcuda_test_util.h"

namespace {

using ::testing::HasSubstr;
using namespace simcuda_test;

class SimcudaVmm : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
};

TEST(SimcudaInit, CallsBeforeCuInitAreNotInitialized) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(0, false);
  EXPECT_EQ(cuMemCreate(&h, kGranularity, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
}

TEST_F(SimcudaVmm, DevicesHaveAttributesAndStableUuids) {
  int value = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0), CUDA_ERROR_INVALID_VALUE);
  CUuuid a{}, b{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid_v2(&b, 1), CUDA_SUCCESS);
  EXPECT_EQ(std::string(a.bytes, 16), "SIMCUDA-GPU-00..");
  EXPECT_EQ(std::string(b.bytes, 16), "SIMCUDA-GPU-01..");
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 1), CUDA_SUCCESS);
  EXPECT_THAT(std::string(name), HasSubstr("simulated"));
  size_t granularity = 0;
  CUmemAllocationProp prop = device_prop(0, true);
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(granularity, kGranularity);
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(granularity, kGranularity);
}

TEST_F(SimcudaVmm, ContextsFollowTheThreadStack) {
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, nullptr);
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext primary1 = use_device(1);
  ASSERT_NE(primary1, nullptr);
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&created, 0, 0), CUDA_SUCCESS);  // pushed and current
  ASSERT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  CUcontext popped = nullptr;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, created);
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  EXPECT_EQ(ctx, primary1);
  ASSERT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxPushCurrent_v2(created), CUDA_ERROR_INVALID_CONTEXT);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);  // released primary is no longer usable
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimcudaVmm, CreateChecksItsArguments) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(0, true);
  EXPECT_EQ(cuMemCreate(nullptr, kGranularity, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, kGranularity, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, kGranularity + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, kGranularity, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp bad_device = device_prop(2, true);
  EXPECT_EQ(cuMemCreate(&h, kGranularity, &bad_device, 0), CUDA_ERROR_INVALID_DEVICE);
  CUmemAllocationProp fabric = device_prop(0, false);
  fabric.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(cuMemCreate(&h, kGranularity, &fabric, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(simcuda_test_allocation_count(), 0u);
  // No current context needed (SPEC-REFERENCE K.3 #6).
  ASSERT_EQ(cuMemCreate(&h, kGranularity, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // already released
  EXPECT_EQ(cuMemRelease(0x1234), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimcudaVmm, MapSetAccessAndReadBack) {
  ASSERT_NE(use_device(0), nullptr);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(1, true);
  ASSERT_EQ(cuMemCreate(&h, 2 * kGranularity, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % kGranularity, 0u);
  // Mapping outside a reservation, unaligned, past the allocation, or twice is refused.
  EXPECT_EQ(cuMemMap(va + 4 * kGranularity, kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va + 4096, kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va, 3 * kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va, kGranularity, 0, 0x1234, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, 2 * kGranularity, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va + kGranularity, kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  // The same allocation again, at an offset, further up the reservation.
  ASSERT_EQ(cuMemMap(va + 2 * kGranularity, kGranularity, kGranularity, h, 0), CUDA_SUCCESS);
  // No access yet: copies fail instead of faulting.
  char byte = 0;
  EXPECT_EQ(cuMemcpyDtoH_v2(&byte, va, 1), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va, kGranularity, &access, 1), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  CUmemAccessDesc bad{{CU_MEM_LOCATION_TYPE_DEVICE, 5}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va, 2 * kGranularity, &bad, 1), CUDA_ERROR_INVALID_VALUE);  // F12b
  ASSERT_EQ(cuMemSetAccess(va, 3 * kGranularity, &access, 1), CUDA_SUCCESS);
  unsigned long long flags = 99;
  CUmemLocation dev1{CU_MEM_LOCATION_TYPE_DEVICE, 1}, dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(cuMemGetAccess(&flags, &dev1, va + 100), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cuMemGetAccess(&flags, &dev0, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  EXPECT_EQ(cuMemGetAccess(&flags, &dev0, va + 3 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // unmapped
  // The second mapping shows the second half of the first one.
  ASSERT_TRUE(fill_pattern(va, 2 * kGranularity, 7));
  std::string second(kGranularity, '\0'), through_alias(kGranularity, '\0');
  ASSERT_EQ(cuMemcpyDtoH_v2(second.data(), va + kGranularity, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(through_alias.data(), va + 2 * kGranularity, kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(second, through_alias);
  ASSERT_EQ(cuMemsetD32_v2(va + 2 * kGranularity, 0xabcdef01u, kGranularity / 4), CUDA_SUCCESS);
  unsigned word = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&word, va + kGranularity + 64, 4), CUDA_SUCCESS);
  EXPECT_EQ(word, 0xabcdef01u);
  // Introspection: which allocation backs the alias.
  simcuda_mapping_info info{};
  ASSERT_EQ(simcuda_test_mapping_at(va + 2 * kGranularity + 5, &info), 0);
  EXPECT_EQ(info.va, va + 2 * kGranularity);
  EXPECT_EQ(info.offset, kGranularity);
  EXPECT_EQ(info.allocation_handle, h);
  EXPECT_EQ(info.location_id, 1);
  EXPECT_EQ(info.access[1], CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(simcuda_test_mappings(nullptr, 0), 2u);
  // Address range and retain by any address inside a mapping.
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, va + 12345), CUDA_SUCCESS);
  EXPECT_EQ(base, va);
  EXPECT_EQ(size, 2 * kGranularity);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, va + 3 * kGranularity), CUDA_ERROR_NOT_FOUND);
  CUmemGenericAllocationHandle retained = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void *>(va + 2 * kGranularity + 7)), CUDA_SUCCESS);
  EXPECT_EQ(retained, h);
  EXPECT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void *>(va + 3 * kGranularity)), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp got{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.location.id, 1);
  EXPECT_EQ(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  // Releasing both references keeps the memory while it is mapped.
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(has_pattern(va, kGranularity, 7));
  EXPECT_EQ(simcuda_test_allocation_count(), 1u);
  // Unmapping part of a mapping is refused; freeing a mapped reservation too.
  EXPECT_EQ(cuMemUnmap(va, kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(va, 4 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va, 3 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(simcuda_test_allocation_count(), 0u);  // last mapping gone: memory freed
  EXPECT_EQ(cuMemcpyDtoH_v2(&byte, va, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressFree(va, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  EXPECT_EQ(cuMemAddressFree(va, 4 * kGranularity), CUDA_SUCCESS);
}

TEST_F(SimcudaVmm, ReadOnlyAccessRefusesWrites) {
  ASSERT_NE(use_device(0), nullptr);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(0, false);
  ASSERT_EQ(cuMemCreate(&h, kGranularity, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = map_rw(h, kGranularity, 0);
  ASSERT_NE(va, 0u);
  ASSERT_TRUE(fill_pattern(va, kGranularity, 3));
  CUmemAccessDesc ro{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  ASSERT_EQ(cuMemSetAccess(va, kGranularity, &ro, 1), CUDA_SUCCESS);
  EXPECT_TRUE(has_pattern(va, kGranularity, 3));
  EXPECT_EQ(cuMemsetD8_v2(va, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(has_pattern(va, kGranularity, 3));
  ASSERT_EQ(cuMemUnmap(va, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, kGranularity), CUDA_SUCCESS);
}

// DRIVER-FACTS F12b: host access to a DEVICE allocation is not supported (801) and a
// rejected call applies none of its descriptors; HOST NONE is accepted.
TEST_F(SimcudaVmm, HostAccessToDeviceMemoryIsNotSupported) {
  ASSERT_NE(use_device(0), nullptr);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(0, false);
  ASSERT_EQ(cuMemCreate(&h, kGranularity, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = map_rw(h, kGranularity, 0);
  ASSERT_NE(va, 0u);
  const CUmemAccessDesc both[2] = {{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ},
                                   {{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ}};
  EXPECT_EQ(cuMemSetAccess(va, kGranularity, both, 2), CUDA_ERROR_NOT_SUPPORTED);
  const CUmemAccessDesc numa{{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_EQ(cuMemSetAccess(va, kGranularity, &numa, 1), CUDA_ERROR_NOT_SUPPORTED);
  unsigned long long flags = 99;
  const CUmemLocation dev0{CU_MEM_LOCATION_TYPE_DEVICE, 0}, numa0{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  ASSERT_EQ(cuMemGetAccess(&flags, &dev0, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);  // the device READ was not applied
  ASSERT_EQ(cuMemGetAccess(&flags, &numa0, va), CUDA_SUCCESS);
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  const CUmemAccessDesc none{{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_NONE};
  EXPECT_EQ(cuMemSetAccess(va, kGranularity, &none, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, kGranularity), CUDA_SUCCESS);
}

TEST_F(SimcudaVmm, HostNumaAllocationsAreHostMemory) {
  ASSERT_NE(use_device(0), nullptr);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t before_free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&before_free, &total), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * kGranularity, &prop, 0), CUDA_SUCCESS);
  CUmemAllocationProp bad_node = prop;
  bad_node.location.id = 1;
  CUmemGenericAllocationHandle other = 0;
  EXPECT_EQ(cuMemCreate(&other, kGranularity, &bad_node, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr va = map_rw(h, 2 * kGranularity, 0);
  ASSERT_NE(va, 0u);
  CUmemAccessDesc host{{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_EQ(cuMemSetAccess(va, 2 * kGranularity, &host, 1), CUDA_SUCCESS);
  ASSERT_TRUE(fill_pattern(va, 2 * kGranularity, 11));
  EXPECT_TRUE(has_pattern(va, 2 * kGranularity, 11));
  size_t after_free = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&after_free, &total), CUDA_SUCCESS);
  EXPECT_EQ(after_free, before_free);  // host memory is not device memory
  CUmemAllocationProp got{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  ASSERT_EQ(cuMemUnmap(va, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

TEST_F(SimcudaVmm, MemGetInfoCountsAllocations) {
  EXPECT_EQ(cuMemGetInfo_v2(nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  size_t free0 = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free0, &total), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_NE(use_device(1), nullptr);
  ASSERT_EQ(cuMemGetInfo_v2(&free0, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, size_t{16} << 30);
  EXPECT_EQ(free0, total);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(1, false);
  ASSERT_EQ(cuMemCreate(&h, 8 * kGranularity, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 1000), CUDA_SUCCESS);  // rounded up to the granularity
  size_t free1 = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free0 - free1, 9 * kGranularity);
  EXPECT_EQ(simcuda_test_bytes_in_use(1), 9 * kGranularity);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemGetInfo_v2(&free1, &total), CUDA_SUCCESS);
  EXPECT_EQ(free1, free0);
  // More than the device holds.
  CUmemAllocationProp big = device_prop(1, false);
  EXPECT_EQ(cuMemCreate(&h, (size_t{16} << 30) + kGranularity, &big, 0), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(SimcudaVmm, CopiesAndMemsetsSyncAndAsync) {
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_NE(use_device(0), nullptr);
  ASSERT_EQ(cuMemAlloc_v2(&p, 3 * 4096), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::string in(4096, 'x'), out(4096, '\0');
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(p, in.data(), in.size(), stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(p + 4096, p, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(p + 8192, 'z', 4096, stream), CUDA_SUCCESS);
  CUevent event = nullptr;
  ASSERT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(event, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(event), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), p + 4096, 4096, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);  // a created stream's copy runs later
  EXPECT_EQ(out, in);
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(out.data()), p + 8192, 4096), CUDA_SUCCESS);
  EXPECT_EQ(out, std::string(4096, 'z'));
  ASSERT_EQ(cuMemcpyAsync_ptsz(p, reinterpret_cast<CUdeviceptr>(std::string(4096, 'q').data()), 4096, CU_STREAM_PER_THREAD),
            CUDA_SUCCESS);
  unsigned word = 0;
  ASSERT_EQ(cuMemsetD32Async(p, 0x01020304u, 1, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH_v2(&word, p, 4), CUDA_SUCCESS);
  EXPECT_EQ(word, 0x01020304u);
  EXPECT_EQ(cuMemsetD32_v2(p + 1, 0, 1), CUDA_ERROR_INVALID_VALUE);  // unaligned
  EXPECT_EQ(cuMemcpyHtoD_v2(reinterpret_cast<CUdeviceptr>(out.data()), in.data(), 1), CUDA_ERROR_INVALID_VALUE);  // not device
  EXPECT_EQ(cuMemcpyAsync(p, p, 1, reinterpret_cast<CUstream>(0x999)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuEventDestroy_v2(event), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(event), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(SimcudaVmm, HostMemoryAllocRegisterAndFlags) {
  void *p = nullptr;
  EXPECT_EQ(cuMemHostAlloc(&p, 4096, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_NE(use_device(0), nullptr);
  ASSERT_EQ(cuMemHostAlloc(&p, 8192, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  unsigned flags = 0;
  ASSERT_EQ(cuMemHostGetFlags(&flags, static_cast<char *>(p) + 100), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_PORTABLE});
  ASSERT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostGetFlags(&flags, p), CUDA_ERROR_INVALID_VALUE);
  std::vector<char> buffer(1 << 16);
  ASSERT_EQ(cuMemHostRegister_v2(buffer.data(), buffer.size(), CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister_v2(buffer.data() + 10, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_EQ(cuMemHostGetFlags(&flags, buffer.data()), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned{CU_MEMHOSTREGISTER_PORTABLE});
  ASSERT_EQ(cuMemHostUnregister(buffer.data()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buffer.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

}  // namespace
