// The simulated driver's GPU identity against the real driver's rows: CUDA_VISIBLE_DEVICES
// subsets, orders, UUID and UUID-prefix entries, invalid entries (DRIVER-FACTS F13), restore
// gpuPairs that must be a permutation of every GPU (F14), and one host access per mapping
// (F12). Each case runs in a child forked before this process touches the driver, since the
// driver reads CUDA_VISIBLE_DEVICES once per process.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "simcuda_test_util.h"

namespace {

using namespace simcuda_test;

// The UUID text of simulated physical GPU `gpu` ("SIMCUDA-GPU-NN.." as 16 bytes, in the
// nvidia-smi format CUDA_VISIBLE_DEVICES takes).
std::string UuidText(int gpu) {
  char raw[17];
  std::snprintf(raw, sizeof raw, "SIMCUDA-GPU-%02d..", gpu);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(raw[i]));
    out += hex;
  }
  return out;
}

struct VisibleCase {
  const char* name;
  std::string visible;  // "UNSET": not set
  CUresult init;
  std::vector<int> gpus;  // physical GPUs behind ordinals 0, 1, ...
  std::string order = "UNSET";  // CUDA_DEVICE_ORDER ("UNSET": not set)
  friend void PrintTo(const VisibleCase& c, std::ostream* os) {
    *os << "CUDA_VISIBLE_DEVICES='" << c.visible << "'";
  }
};

// In a child: 4 simulated GPUs, CUDA_VISIBLE_DEVICES as the case says; exit 0 when cuInit,
// cuDeviceGetCount and every ordinal's UUID answer as the case expects.
int RunVisibleCase(const VisibleCase& c) {
  setenv("SIMCUDA_DEVICE_COUNT", "4", 1);
  if (c.visible == "UNSET") unsetenv("CUDA_VISIBLE_DEVICES");
  else setenv("CUDA_VISIBLE_DEVICES", c.visible.c_str(), 1);
  if (c.order == "UNSET") unsetenv("CUDA_DEVICE_ORDER");
  else setenv("CUDA_DEVICE_ORDER", c.order.c_str(), 1);
  const CUresult init = cuInit(0);
  if (init != c.init) return 10;
  if (init != CUDA_SUCCESS) return 0;
  int count = -1;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count != static_cast<int>(c.gpus.size())) return 11;
  for (int d = 0; d < count; ++d) {
    CUuuid uuid{};
    if (cuDeviceGetUuid_v2(&uuid, d) != CUDA_SUCCESS) return 12;
    char expected[17];
    std::snprintf(expected, sizeof expected, "SIMCUDA-GPU-%02d..", c.gpus[static_cast<size_t>(d)]);
    if (std::memcmp(uuid.bytes, expected, 16) != 0) return 13;
  }
  CUdevice past = 0;
  return cuDeviceGet(&past, count) == CUDA_ERROR_INVALID_DEVICE ? 0 : 14;
}

class VisibleDevices : public testing::TestWithParam<VisibleCase> {};

TEST_P(VisibleDevices, ChooseAndOrderTheGpusAsTheRealDriver) {
  const VisibleCase& c = GetParam();
  const pid_t child = fork_child([&] { return RunVisibleCase(c); });
  EXPECT_EQ(wait_child(child), 0) << "CUDA_VISIBLE_DEVICES='" << c.visible
                                  << "' (10: cuInit's result, 11: the count, 13: an ordinal's GPU)";
}

// The rows of DRIVER-FACTS F13, on 4 GPUs.
INSTANTIATE_TEST_SUITE_P(
    F13, VisibleDevices,
    testing::Values(VisibleCase{"Unset", "UNSET", CUDA_SUCCESS, {0, 1, 2, 3}},
                    VisibleCase{"One", "2", CUDA_SUCCESS, {2}},
                    VisibleCase{"Reversed", "3,1", CUDA_SUCCESS, {3, 1}},
                    VisibleCase{"Spaces", " 1 , 0", CUDA_SUCCESS, {1, 0}},
                    VisibleCase{"InvalidEntryEndsTheList", "0,7,1", CUDA_SUCCESS, {0}},
                    VisibleCase{"InvalidFirstEntry", "7,0", CUDA_ERROR_NO_DEVICE, {}},
                    VisibleCase{"MinusOne", "-1", CUDA_ERROR_NO_DEVICE, {}},
                    VisibleCase{"Empty", "", CUDA_ERROR_NO_DEVICE, {}},
                    VisibleCase{"Duplicate", "1,1", CUDA_ERROR_INVALID_DEVICE, {}},
                    VisibleCase{"Uuid", UuidText(2), CUDA_SUCCESS, {2}},
                    VisibleCase{"UuidPrefix", UuidText(3).substr(0, 36), CUDA_SUCCESS, {3}},
                    VisibleCase{"UuidThenIndex", UuidText(2) + ",0", CUDA_SUCCESS, {2}},
                    VisibleCase{"AmbiguousUuidPrefix", "GPU-53494d43", CUDA_ERROR_NO_DEVICE, {}},
                    VisibleCase{"UnknownUuid", "GPU-bogus", CUDA_ERROR_NO_DEVICE, {}},
                    // Identical GPUs: FASTEST_FIRST (the default) and PCI_BUS_ID order them
                    // alike, PCI order (F13); the list's own order still wins.
                    VisibleCase{"UnsetFastestFirst", "UNSET", CUDA_SUCCESS, {0, 1, 2, 3},
                                "FASTEST_FIRST"},
                    VisibleCase{"UnsetPciBusId", "UNSET", CUDA_SUCCESS, {0, 1, 2, 3},
                                "PCI_BUS_ID"},
                    VisibleCase{"ReversedPciBusId", "1,0", CUDA_SUCCESS, {1, 0}, "PCI_BUS_ID"},
                    VisibleCase{"ReversedFastestFirst", "1,0", CUDA_SUCCESS, {1, 0},
                                "FASTEST_FIRST"},
                    VisibleCase{"Garbage", "garbage", CUDA_ERROR_NO_DEVICE, {}},
                    VisibleCase{"TruncatedAtGarbage", "2,garbage,1", CUDA_SUCCESS, {2}},
                    VisibleCase{"UuidThenMissingIndex", UuidText(1) + ",7", CUDA_SUCCESS, {1}}),
    [](const testing::TestParamInfo<VisibleCase>& param) { return std::string(param.param.name); });

CUprocessState StateOf(pid_t pid) {
  CUprocessState state = CU_PROCESS_STATE_FAILED;
  EXPECT_EQ(cuCheckpointProcessGetState(pid, &state), CUDA_SUCCESS);
  return state;
}

CUresult RestoreWith(pid_t pid, std::vector<CUcheckpointGpuPair> pairs) {
  CUcheckpointRestoreArgs args{};
  args.gpuPairs = pairs.data();
  args.gpuPairsCount = static_cast<unsigned>(pairs.size());
  return cuCheckpointProcessRestore(pid, &args);
}

// F14 (and F7b): a process pinned to GPU 1 by CUDA_VISIBLE_DEVICES, restored by a tool that
// sees both GPUs. Pair lists that are not a permutation of every GPU fail INVALID_VALUE and
// leave it CHECKPOINTED; the swap then moves it: its device 0 is GPU 0, every byte intact.
TEST(SimcudaGpuPairs, F14PairsMustBeAPermutationOfEveryGpu) {
  constexpr size_t kSize = 4 * kGranularity;
  Pipe command, reply;
  const pid_t child = fork_child([&] {
    setenv("CUDA_VISIBLE_DEVICES", "1", 1);
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop = device_prop(0, false);
    if (cuMemCreate(&h, kSize, &prop, 0) != CUDA_SUCCESS) return 11;
    const CUdeviceptr va = map_rw(h, kSize, 0);
    if (va == 0 || !fill_pattern(va, kSize, 14u)) return 12;
    reply.send('R');
    if (command.receive() != 'V') return 20;
    CUuuid now{};
    if (cuDeviceGetUuid_v2(&now, 0) != CUDA_SUCCESS) return 21;
    if (std::memcmp(now.bytes, "SIMCUDA-GPU-00..", 16) != 0) return 22;
    return has_pattern(va, kSize, 14u) ? 0 : 23;
  });
  ASSERT_EQ(reply.receive(), 'R');
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUuuid gpu0{}, gpu1{};
  ASSERT_EQ(cuDeviceGetUuid_v2(&gpu0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid_v2(&gpu1, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessLock(child, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessCheckpoint(child, nullptr), CUDA_SUCCESS);
  const std::vector<std::vector<CUcheckpointGpuPair>> refused = {
      {{gpu1, gpu0}},                // its own GPU only
      {{gpu1, gpu1}},                // its own GPU, identity only
      {{gpu0, gpu1}, {gpu1, gpu1}},  // many-to-one
      {{gpu0, gpu0}, {gpu0, gpu1}},  // one GPU mapped twice
  };
  for (const auto& pairs : refused) {
    EXPECT_EQ(RestoreWith(child, pairs), CUDA_ERROR_INVALID_VALUE) << pairs.size() << " pair(s)";
    EXPECT_EQ(StateOf(child), CU_PROCESS_STATE_CHECKPOINTED);
  }
  ASSERT_EQ(RestoreWith(child, {{gpu0, gpu1}, {gpu1, gpu0}}), CUDA_SUCCESS);
  ASSERT_EQ(cuCheckpointProcessUnlock(child, nullptr), CUDA_SUCCESS);
  command.send('V');
  EXPECT_EQ(wait_child(child), 0) << "20+: the child after restore (22: not on GPU 0, 23: bytes)";
}

// F12: one host access per mapping, set by HOST and HOST_NUMA descriptors alike; asked as
// HOST while it is NONE, the driver answers device 0's access.
TEST(SimcudaAccess, F12OneHostAccessPerMapping) {
  const pid_t child = fork_child([] {
    if (cuInit(0) != CUDA_SUCCESS || use_device(0) == nullptr) return 10;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    if (cuMemCreate(&h, kGranularity, &prop, 0) != CUDA_SUCCESS) return 11;
    CUdeviceptr va = 0;
    if (cuMemAddressReserve(&va, kGranularity, 0, 0, 0) != CUDA_SUCCESS) return 12;
    if (cuMemMap(va, kGranularity, 0, h, 0) != CUDA_SUCCESS) return 13;
    const auto set = [&](CUmemLocationType type, int id, CUmemAccess_flags flags) {
      CUmemAccessDesc d{};
      d.location.type = type;
      d.location.id = id;
      d.flags = flags;
      return cuMemSetAccess(va, kGranularity, &d, 1) == CUDA_SUCCESS;
    };
    const auto get = [&](CUmemLocationType type) {
      CUmemLocation loc{};
      loc.type = type;
      loc.id = 0;
      unsigned long long flags = 99;
      return cuMemGetAccess(&flags, &loc, va) == CUDA_SUCCESS ? flags : 99ull;
    };
    // The measured sequence (order A of tests/gpu/gpu_driver_facts access).
    if (!set(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) return 20;
    if (get(CU_MEM_LOCATION_TYPE_HOST) != 3 || get(CU_MEM_LOCATION_TYPE_HOST_NUMA) != 0) return 21;
    if (!set(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_READ)) return 22;
    if (get(CU_MEM_LOCATION_TYPE_HOST) != 1 || get(CU_MEM_LOCATION_TYPE_HOST_NUMA) != 1) return 23;
    if (!set(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) return 24;
    if (get(CU_MEM_LOCATION_TYPE_HOST) != 3 || get(CU_MEM_LOCATION_TYPE_HOST_NUMA) != 3) return 25;
    if (!set(CU_MEM_LOCATION_TYPE_HOST, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE)) return 26;
    if (get(CU_MEM_LOCATION_TYPE_HOST_NUMA) != 0 || get(CU_MEM_LOCATION_TYPE_HOST) != 3) return 27;
    if (!set(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE)) return 28;
    return get(CU_MEM_LOCATION_TYPE_HOST) == 0 ? 0 : 29;
  });
  EXPECT_EQ(wait_child(child), 0) << "the step that answered differently from DRIVER-FACTS F12";
}

}  // namespace
