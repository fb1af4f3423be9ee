// The shim's GPU identity (src/shim/tables/gpu_identity.h) over a fake driver table: the
// device list INSPECT reports (the process's own ordinal order, the last list while the
// driver must not be called), and the check before a restore onto other GPUs rebuilds on
// the recorded ordinals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/text.h"
#include "shim/tables/gpu_identity.h"

namespace cusnap::shim {
namespace {

using ::testing::HasSubstr;

// The fake machine: 3 GPUs; this process's ordinal -> GPU table and its length.
int g_count = 0;
int g_table[3] = {0, 1, 2};

CUuuid UuidOf(int gpu) {
  CUuuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = static_cast<char>(0x10 * gpu + i);
  return u;
}

std::string TextOf(int gpu) {
  const CUuuid u = UuidOf(gpu);
  return FormatGpuUuid(reinterpret_cast<const unsigned char*>(u.bytes));
}

CUresult FakeCount(int* count) {
  *count = g_count;
  return CUDA_SUCCESS;
}
CUresult FakeGet(CUdevice* device, int ordinal) {
  if (ordinal < 0 || ordinal >= g_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* uuid, CUdevice device) {
  *uuid = UuidOf(g_table[device]);
  return CUDA_SUCCESS;
}

DriverApi FakeApi() {
  DriverApi api{};
  api.cuDeviceGetCount = FakeCount;
  api.cuDeviceGet = FakeGet;
  api.cuDeviceGetUuid_v2 = FakeUuid;
  return api;
}

// A process that sees GPU 2 then GPU 0 ("2,0"): the list in its ordinal order; while the
// driver must not be called (RELEASED), the last list read, whatever the driver says now.
TEST(ShimGpuIdentity, ListsTheProcessOrdinalsAndKeepsTheLastWhileLocked) {
  const DriverApi api = FakeApi();
  g_count = 2;
  g_table[0] = 2;
  g_table[1] = 0;
  EXPECT_EQ(JoinedGpuUuids(api, true), TextOf(2) + "," + TextOf(0));
  g_table[0] = 1;
  EXPECT_EQ(JoinedGpuUuids(api, false), TextOf(2) + "," + TextOf(0));
  EXPECT_EQ(JoinedGpuUuids(api, true), TextOf(1) + "," + TextOf(0));
  EXPECT_EQ(VisibleGpuUuids(DriverApi{}), std::vector<std::string>{});  // no driver
}

// A process pinned to GPU 1, restored with 0=1,1=0: its device 0 must be GPU 0 afterwards
// (the driver keeps ordinals, F7b); still GPU 1, the check names the ordinal and the GPUs.
TEST(ShimGpuIdentity, CheckAfterMoveWantsEachOrdinalOnItsMappedGpu) {
  const DriverApi api = FakeApi();
  g_count = 1;
  g_table[0] = 1;
  ASSERT_EQ(JoinedGpuUuids(api, true), TextOf(1));  // read before the checkpoint
  const std::string swap = TextOf(0) + "=" + TextOf(1) + "," + TextOf(1) + "=" + TextOf(0);
  g_table[0] = 0;
  EXPECT_TRUE(CheckDevicesAfterMove(api, swap).ok());
  g_table[0] = 1;
  const Status stayed = CheckDevicesAfterMove(api, swap);
  ASSERT_FALSE(stayed.ok());
  EXPECT_EQ(stayed.error().code, CUDA_ERROR_INVALID_DEVICE);
  EXPECT_THAT(stayed.error().message,
              HasSubstr(": its device 0 was " + TextOf(1) + ", which the device map moves to " +
                        TextOf(0) + ", but after the native restore its device 0 is " +
                        TextOf(1) + " (the driver renumbered"));
  // A GPU the map leaves out stays where it was.
  EXPECT_TRUE(CheckDevicesAfterMove(api, TextOf(0) + "=" + TextOf(2) + "," + TextOf(2) + "=" +
                                             TextOf(0)).ok());
  g_count = 0;  // no device any more: named as such
  EXPECT_THAT(CheckDevicesAfterMove(api, swap).error().message, HasSubstr("is no GPU"));
}

}  // namespace
}  // namespace cusnap::shim
