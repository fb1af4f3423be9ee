// Cross-process sharing through POSIX descriptors on the simulated driver: an exported
// descriptor has no seals (it never looks like a cusnap ticket), the importer keeps no
// descriptor of its own, repeated imports alias one handle, writes are seen on both sides,
// foreign descriptors are refused, and a child forked after cuInit has no usable driver.
#include <dirent.h>
#include <sys/mman.h>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

// Descriptors of this process whose target names a simcuda allocation.
int simcuda_descriptors() {
  int count = 0;
  DIR *dir = opendir("/proc/self/fd");
  while (dirent *e = readdir(dir)) {
    char link[256] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) > 0 && std::strstr(link, "simcuda-alloc") != nullptr) ++count;
  }
  closedir(dir);
  return count;
}

TEST(SimcudaSharing, ExportImportAcrossProcesses) {
  SocketPair sockets;
  Pipe to_child, to_parent;
  pid_t child = fork_child([&] {
    if (cuInit(0) != CUDA_SUCCESS || use_device(1) == nullptr) return 10;
    int fd = receive_fd(sockets.fds[1]);
    if (fd < 0) return 11;
    CUmemGenericAllocationHandle h = 0, again = 0;
    auto os = reinterpret_cast<void *>(static_cast<intptr_t>(fd));
    if (cuMemImportFromShareableHandle(&h, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) return 12;
    if (cuMemImportFromShareableHandle(&again, os, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) return 13;
    if (again != h) return 14;  // one handle per allocation per process
    close(fd);
    if (simcuda_descriptors() != 0) return 15;  // the driver kept no descriptor
    CUmemAllocationProp prop{};
    if (cuMemGetAllocationPropertiesFromHandle(&prop, h) != CUDA_SUCCESS || prop.location.id != 0) return 16;
    CUdeviceptr va = map_rw(h, 2 * kGranularity, 1);
    if (va == 0 || !has_pattern(va, 2 * kGranularity, 9)) return 17;
    simcuda_mapping_info info{};
    if (simcuda_test_mapping_at(va, &info) != 0 || info.imported != 1) return 18;
    // An importer keeps no descriptor to export again.
    int out = -1;
    if (cuMemExportToShareableHandle(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_ERROR_NOT_SUPPORTED) return 19;
    if (!fill_pattern(va, kGranularity, 90)) return 20;
    to_parent.send('W');
    if (to_child.receive() != 'Q') return 21;
    if (cuMemUnmap(va, 2 * kGranularity) != CUDA_SUCCESS || cuMemRelease(h) != CUDA_SUCCESS ||
        cuMemRelease(again) != CUDA_SUCCESS)
      return 22;
    return simcuda_test_allocation_count() == 0 ? 0 : 23;
  });
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  ASSERT_NE(use_device(0), nullptr);
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = device_prop(0, true);
  ASSERT_EQ(cuMemCreate(&h, 2 * kGranularity, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va = map_rw(h, 2 * kGranularity, 0);
  ASSERT_NE(va, 0u);
  ASSERT_TRUE(fill_pattern(va, 2 * kGranularity, 9));
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(nullptr, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, 0x4321, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(fcntl(fd, F_GET_SEALS), 0);  // no seals: not a cusnap ticket
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  send_fd(sockets.fds[0], fd);
  close(fd);
  ASSERT_EQ(to_parent.receive(), 'W');
  EXPECT_TRUE(has_pattern(va, kGranularity, 90));  // the importer's write
  EXPECT_TRUE(has_pattern(va + kGranularity, kGranularity, 9));
  to_child.send('Q');
  EXPECT_EQ(wait_child(child), 0);
  // A descriptor that is not a simcuda allocation is refused.
  int other = memfd_create("not-cuda", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(other, kGranularity), 0);
  CUmemGenericAllocationHandle imported = 0;
  EXPECT_EQ(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void *>(static_cast<intptr_t>(other)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE);
  close(other);
  EXPECT_EQ(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void *>(intptr_t{-1}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemImportFromShareableHandle(nullptr, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), CUDA_ERROR_INVALID_VALUE);
  // A private allocation cannot be exported.
  CUmemGenericAllocationHandle priv = 0;
  CUmemAllocationProp none = device_prop(0, false);
  ASSERT_EQ(cuMemCreate(&priv, kGranularity, &none, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, priv, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimcudaSharing, ChildForkedAfterInitHasNoDriver) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  pid_t child = fork_child([] {
    int count = 0;
    if (cuInit(0) != CUDA_ERROR_NOT_INITIALIZED) return 1;
    return cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 2;
  });
  EXPECT_EQ(wait_child(child), 0);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);  // the parent's driver is untouched
}

}  // namespace
