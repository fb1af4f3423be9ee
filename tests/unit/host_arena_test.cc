// The carrier's host arena (shim/carrier/host_arena.h): growth touched at once or in the
// background, in place when it can, and returned to the kernel.
#include "shim/carrier/host_arena.h"

#include <gtest/gtest.h>

#include <cstring>

namespace cusnap::shim {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Every byte of [begin, begin + bytes) reads zero (fresh anonymous pages) and takes a write.
void ExpectZeroAndWritable(std::byte* begin, size_t bytes) {
  for (size_t at = 0; at < bytes; at += 4096) {
    ASSERT_EQ(begin[at], std::byte{0}) << "offset " << at;
    begin[at] = std::byte{0x5a};
  }
}

TEST(HostArena, GrowsInWholeStepsAndKeepsWhatItHolds) {
  HostArena arena;
  ASSERT_TRUE(arena.Grow(3 * kMiB, 4));
  EXPECT_EQ(arena.capacity(), 4 * kMiB);  // two 2 MiB steps
  std::memset(arena.data(), 0x11, arena.capacity());
  ASSERT_TRUE(arena.Grow(2 * kMiB, 4));  // smaller: nothing changes
  EXPECT_EQ(arena.capacity(), 4 * kMiB);
  arena.ShrinkTo(kMiB);
  EXPECT_EQ(arena.capacity(), 2 * kMiB);
  EXPECT_EQ(arena.data()[2 * kMiB - 1], std::byte{0x11});
  arena.ShrinkTo(0);
  EXPECT_EQ(arena.capacity(), 0u);
  EXPECT_EQ(arena.data(), nullptr);
}

TEST(HostArena, GrowthInTheBackgroundIsUsableAtOnceAndTouchedByFinish) {
  HostArena arena;
  const size_t bytes = 5 * BackgroundTouch::kTouchUnit + 6 * kMiB;  // a partial last unit
  ASSERT_TRUE(arena.GrowInBackground(bytes, 3));
  ASSERT_EQ(arena.capacity(), bytes);
  // The last unit first: a wait for any range returns once its pages are touched.
  std::byte* last = arena.data() + 5 * BackgroundTouch::kTouchUnit;
  arena.WaitTouched(last, 6 * kMiB);
  ExpectZeroAndWritable(last, 6 * kMiB);
  // A range across two units, and ranges partly or wholly outside the arena.
  std::byte* across = arena.data() + BackgroundTouch::kTouchUnit - kMiB;
  arena.WaitTouched(across, 2 * kMiB);
  ExpectZeroAndWritable(across, 2 * kMiB);
  arena.WaitTouched(arena.data() - 4096, 8192);
  arena.WaitTouched(arena.data() + bytes, 4096);
  arena.FinishTouching();
  EXPECT_EQ(arena.FinishTouching(), 0u);  // nothing left to wait for
  ExpectZeroAndWritable(arena.data(), BackgroundTouch::kTouchUnit - kMiB);
  EXPECT_EQ(last[0], std::byte{0x5a});  // the background touch wrote nothing over it
}

TEST(HostArena, GrowingAgainWhileTouchingKeepsTheTouchedBytes) {
  HostArena arena;
  ASSERT_TRUE(arena.Grow(2 * kMiB, 1));
  std::memset(arena.data(), 0x22, 2 * kMiB);
  ASSERT_TRUE(arena.GrowInBackground(2 * BackgroundTouch::kTouchUnit, 2));
  ASSERT_TRUE(arena.Grow(3 * BackgroundTouch::kTouchUnit, 2));  // finishes the first touch
  EXPECT_EQ(arena.capacity(), 3 * BackgroundTouch::kTouchUnit);
  ExpectZeroAndWritable(arena.data() + 2 * kMiB, 3 * BackgroundTouch::kTouchUnit - 2 * kMiB);
}

TEST(HostArena, OneThreadTouchesEverything) {
  HostArena arena;
  ASSERT_TRUE(arena.GrowInBackground(BackgroundTouch::kTouchUnit + 2 * kMiB, 1));
  arena.WaitTouched(arena.data(), arena.capacity());
  ExpectZeroAndWritable(arena.data(), arena.capacity());
}

}  // namespace
}  // namespace cusnap::shim
