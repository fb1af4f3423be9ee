// --device-map parsing and resolution (coordinator/native/device_map.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "coordinator/native/device_map.h"

namespace cusnap::testing {
namespace {

using coord::DevicePair;
using coord::DeviceRef;

const std::string kUuid0 = "GPU-11111111-2222-3333-4444-555555555555";
const std::string kUuid1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

TEST(CoordinatorDeviceMap, ParsesOrdinalPairs) {
  auto map = coord::ParseDeviceMap("0=1,1=0");
  ASSERT_TRUE(map.ok()) << map.error().message;
  EXPECT_EQ(*map, (std::vector<DevicePair>{{{0, ""}, {1, ""}}, {{1, ""}, {0, ""}}}));
}

TEST(CoordinatorDeviceMap, ParsesUuidPairsCaseInsensitively) {
  auto map = coord::ParseDeviceMap("GPU-AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE=" + kUuid0);
  ASSERT_TRUE(map.ok()) << map.error().message;
  ASSERT_EQ(map->size(), 1u);
  EXPECT_EQ((*map)[0].from, (DeviceRef{-1, kUuid1}));
  EXPECT_EQ((*map)[0].to, (DeviceRef{-1, kUuid0}));
}

TEST(CoordinatorDeviceMap, AcceptsSpacesAndMixedForms) {
  auto map = coord::ParseDeviceMap(" 0 = " + kUuid1);
  ASSERT_TRUE(map.ok()) << map.error().message;
  EXPECT_EQ((*map)[0].from, (DeviceRef{0, ""}));
  EXPECT_EQ((*map)[0].to, (DeviceRef{-1, kUuid1}));
}

TEST(CoordinatorDeviceMap, RejectsBadInput) {
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"", "device map is empty (expected e.g. 0=1,1=0)"},
      {"0", "device map pair '0' is not of the form OLD=NEW"},
      {"0=1=2", "device map pair '0=1=2' is not of the form OLD=NEW"},
      {"0=1,,1=0", "device map pair '' is not of the form OLD=NEW"},
      {"0=1,", "device map '0=1,' ends with ','"},
      {"-1=0", "device map pair '-1=0': '-1' is neither a device ordinal nor a GPU UUID "
               "(GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"},
      {"0=GPU-1234", "device map pair '0=GPU-1234': 'GPU-1234' is neither a device ordinal nor "
                     "a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"},
  };
  for (const auto& c : cases) {
    auto map = coord::ParseDeviceMap(c.text);
    ASSERT_FALSE(map.ok()) << c.text;
    EXPECT_EQ(map.error().message, c.message) << c.text;
  }
}

TEST(CoordinatorDeviceMap, ResolvesOrdinalsToUuids) {
  auto map = coord::ParseDeviceMap("0=1,1=0");
  ASSERT_TRUE(map.ok());
  auto pairs = coord::ResolveDeviceMap(*map, {kUuid0, kUuid1});
  ASSERT_TRUE(pairs.ok()) << pairs.error().message;
  ASSERT_EQ(pairs->size(), 2u);
  EXPECT_EQ((*pairs)[0].from, kUuid0);
  EXPECT_EQ((*pairs)[0].to, kUuid1);
  EXPECT_EQ((*pairs)[1].from, kUuid1);
  EXPECT_EQ((*pairs)[1].to, kUuid0);
}

TEST(CoordinatorDeviceMap, ResolutionErrorsNameTheDevice) {
  auto out_of_range = coord::ResolveDeviceMap(*coord::ParseDeviceMap("0=2"), {kUuid0, kUuid1});
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.error().message, "device map names device 2, but the driver has 2 device(s)");
  const std::string unknown = "GPU-99999999-2222-3333-4444-555555555555";
  auto not_listed = coord::ResolveDeviceMap(*coord::ParseDeviceMap(unknown + "=0"), {kUuid0});
  ASSERT_FALSE(not_listed.ok());
  EXPECT_EQ(not_listed.error().message, "device map names " + unknown + ", which the driver does not list");
  // The same GPU named once by ordinal and once by UUID is still a duplicate.
  auto dup = coord::ResolveDeviceMap(*coord::ParseDeviceMap("0=1," + kUuid0 + "=0"), {kUuid0, kUuid1});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().message, "device map maps device 0 (" + kUuid0 + ") twice");
  // Duplicates parse (they are a wrong map, refused with the restore, not wrong syntax).
  auto twice = coord::ParseDeviceMap("0=1,0=0");
  ASSERT_TRUE(twice.ok());
  auto from_twice = coord::ResolveDeviceMap(*twice, {kUuid0, kUuid1});
  ASSERT_FALSE(from_twice.ok());
  EXPECT_EQ(from_twice.error().message, "device map maps device 0 (" + kUuid0 + ") twice");
  auto onto_one = coord::ResolveDeviceMap(*coord::ParseDeviceMap("0=1,1=1"), {kUuid0, kUuid1});
  ASSERT_FALSE(onto_one.ok());
  EXPECT_EQ(onto_one.error().message,
            "device map restores two devices onto device 1 (" + kUuid1 + ")");
}

// DRIVER-FACTS F14: the driver takes only a permutation of every GPU. A swap of two GPUs
// out of four gets the other two as identity pairs; a map that restores onto a GPU without
// saying where that GPU's processes go is refused (the message: ResolutionErrorsNameTheDevice).
TEST(CoordinatorDeviceMap, ResolvesToAPermutationOfEveryGpu) {
  const std::string kUuid2 = "GPU-22222222-2222-2222-2222-222222222222";
  const std::string kUuid3 = "GPU-33333333-3333-3333-3333-333333333333";
  auto swap = coord::ResolveDeviceMap(*coord::ParseDeviceMap("0=1,1=0"), {kUuid0, kUuid1, kUuid2, kUuid3});
  ASSERT_TRUE(swap.ok()) << swap.error().message;
  ASSERT_EQ(swap->size(), 4u);
  EXPECT_EQ((*swap)[2].from, kUuid2);
  EXPECT_EQ((*swap)[2].to, kUuid2);
  EXPECT_EQ((*swap)[3].from, kUuid3);
  EXPECT_EQ((*swap)[3].to, kUuid3);
  for (const char* incomplete : {"0=1", "1=0", "0=1,1=2"}) {
    auto refused = coord::ResolveDeviceMap(*coord::ParseDeviceMap(incomplete), {kUuid0, kUuid1, kUuid2});
    ASSERT_FALSE(refused.ok()) << incomplete;
    EXPECT_THAT(refused.error().message, ::testing::StartsWith("device map is incomplete: it moves "));
  }
}

TEST(CoordinatorDeviceMap, UuidFormatRoundTrips) {
  unsigned char bytes[16];
  ASSERT_TRUE(coord::ParseGpuUuid(kUuid1, bytes));
  EXPECT_EQ(bytes[0], 0xaa);
  EXPECT_EQ(bytes[15], 0xee);
  EXPECT_EQ(coord::FormatGpuUuid(bytes), kUuid1);
  EXPECT_FALSE(coord::ParseGpuUuid("GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeee", bytes));   // short
  EXPECT_FALSE(coord::ParseGpuUuid("MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", bytes));  // prefix
  EXPECT_FALSE(coord::ParseGpuUuid("GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeeg", bytes));  // hex
}

// The room check's input: bytes per GPU receiving memory, each participant's allocations
// located through its OWN ordinals (a rank pinned to GPU 1 calls it device 0).
TEST(CoordinatorDeviceMap, BytesMovedOntoUseEachParticipantsOwnOrdinals) {
  const std::vector<coord::UuidPair> swap = {{kUuid0, kUuid1}, {kUuid1, kUuid0}};
  // rank0 sees GPU 0 as device 0 (40 bytes there); rank1 sees GPU 1 as device 0 (8 + 2).
  const std::vector<std::vector<std::pair<int, std::string>>> gpus = {{{0, kUuid0}},
                                                                      {{0, kUuid1}}};
  const std::vector<std::vector<std::pair<int, uint64_t>>> allocations = {{{0, 40}},
                                                                           {{0, 8}, {0, 2}}};
  EXPECT_EQ(coord::BytesMovedOnto(swap, gpus, allocations),
            (std::map<std::string, uint64_t>{{kUuid0, 10}, {kUuid1, 40}}));
  // In place: no GPU receives memory, nothing to check.
  const std::vector<coord::UuidPair> stay = {{kUuid0, kUuid0}, {kUuid1, kUuid1}};
  EXPECT_TRUE(coord::BytesMovedOnto(stay, gpus, allocations).empty());
}

}  // namespace
}  // namespace cusnap::testing
