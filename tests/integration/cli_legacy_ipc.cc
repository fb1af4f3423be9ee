// cuMemAlloc memory shared by legacy CUDA IPC under the shim: the shim serves
// cuMemAlloc from VMM allocations it owns and cuIpc* mem handles over the creators' endpoints,
// so a job sharing memory this way checkpoints and restores (natively it cannot:
// DRIVER-FACTS F11) with every byte and every pointer kept, between 2 and 4 processes and
// onto swapped GPUs; what the application sees (pointer attributes, address ranges, errors)
// is what it sees without the shim; a handle with a wrong secret maps nothing; and memory
// cusnap cannot carry is refused by name at checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "common/socket.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr unsigned kLazyPeerAccess = 1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (cuda.h)
constexpr size_t kBytes = 3 * 1048576 + 4096;  // not a granularity multiple

class LegacyIpcTest : public JobTest {
 protected:
  /// `from` takes the IPC handle of view `view` at `offset`; the test relays its 64 bytes to
  /// `to` (with the secret's bytes flipped when `corrupt`), which opens it as view `as`.
  std::string Open(Worker& from, const std::string& view, Worker& to, const std::string& as, unsigned flags,
                   bool corrupt = false, size_t offset = 4096) {
    EXPECT_EQ(Ask(from, "ipcget " + view + " " + std::to_string(offset)), "ok");
    unsigned char handle[64] = {};
    int fd = -1;
    auto got = cusnap::RecvPacket(from.channel, handle, sizeof handle, &fd, cusnap::Deadline::AfterMs(kWaitMs));
    EXPECT_TRUE(got.ok() && *got == sizeof handle);
    if (corrupt) handle[60] ^= 0x5a;  // inside the 128-bit secret (bytes 48..63)
    EXPECT_TRUE(cusnap::SendPacket(to.channel, handle, sizeof handle, -1, cusnap::Deadline::AfterMs(kWaitMs)).ok());
    return Ask(to, "ipcopen " + as + " " + std::to_string(kBytes) + " " + std::to_string(flags));
  }
  void CheckRound(const std::vector<std::pair<Worker*, std::string>>& views, const std::string& state,
                  const std::vector<std::string>& restore_extra = {}) {
    std::vector<std::string> ranges;
    for (auto& [w, v] : views) ranges.push_back(Ask(*w, "range " + v + " 100"));
    const Ran checkpointed = Checkpoint(state);
    ASSERT_EQ(checkpointed.status, 0) << checkpointed.err;
    const Ran restored = Restore(state, restore_extra);
    ASSERT_EQ(restored.status, 0) << restored.err;
    for (size_t i = 0; i < views.size(); ++i) {
      auto& [w, v] = views[i];
      EXPECT_EQ(Ask(*w, "check " + v + " 14"), "ok") << w->name << " " << v;
      EXPECT_EQ(Ask(*w, "range " + v + " 100"), ranges[i]) << "same pointer and range after restore";
    }
    // Every process writes one word of its own; every other one reads it.
    for (size_t i = 0; i < views.size(); ++i) {
      auto& [w, v] = views[i];
      const std::string word = std::to_string(1000 + i);
      ASSERT_EQ(Ask(*w, "write " + v + " " + word + " " + std::to_string(0xa0000 + i)), "ok");
      for (auto& [other, ov] : views) EXPECT_EQ(Ask(*other, "read " + ov + " " + word), "ok " + std::to_string(0xa0000 + i));
      ASSERT_EQ(Ask(*w, "fill " + v + " 14"), "ok");  // the pattern again
    }
  }
};

TEST_F(LegacyIpcTest, TwoProcessesShareCuMemAllocThroughCyclesAndSwappedGpus) {
  Worker& a = Start("creator", 0);
  Worker& b = Start("opener", 1);
  ASSERT_THAT(Ask(a, "malloc V " + std::to_string(kBytes)), StartsWith("ok "));
  ASSERT_EQ(Ask(a, "fill V 14"), "ok");
  ASSERT_THAT(Open(a, "V", b, "W", kLazyPeerAccess), StartsWith("ok "));
  ASSERT_EQ(Ask(b, "check W 14"), "ok");
  const std::string opened_again = Open(a, "V", b, "W2", kLazyPeerAccess);
  EXPECT_EQ(opened_again, "ok " + OkValue(Ask(b, "range W 0")).substr(0, OkValue(Ask(b, "range W 0")).find(' ')))
      << "the same handle opened again is the same pointer";
  ASSERT_EQ(Ask(b, "ipcclose W2"), "ok");
  const std::vector<std::pair<Worker*, std::string>> views{{&a, "V"}, {&b, "W"}};
  ASSERT_NO_FATAL_FAILURE(CheckRound(views, dir_ + "/state1"));
  ASSERT_NO_FATAL_FAILURE(CheckRound(views, dir_ + "/state2", {"--device-map", "0=1,1=0"}));
  ASSERT_NO_FATAL_FAILURE(CheckRound(views, dir_ + "/state3", {"--device-map", "0=1,1=0"}));
  EXPECT_EQ(Ask(b, "ipcclose W"), "ok");
  EXPECT_EQ(Ask(a, "free V"), "ok");
}

TEST_F(LegacyIpcTest, FourProcessesShareOneAllocation) {
  Worker& a = Start("creator", 0);
  std::vector<std::pair<Worker*, std::string>> views{{&a, "V"}};
  ASSERT_THAT(Ask(a, "malloc V " + std::to_string(kBytes)), StartsWith("ok "));
  ASSERT_EQ(Ask(a, "fill V 14"), "ok");
  for (int i = 1; i < 4; ++i) {
    Worker& w = Start(Numbered("opener", i), i % 2);
    ASSERT_THAT(Open(a, "V", w, "W", i == 1 ? 0u : kLazyPeerAccess), StartsWith("ok "));
    views.emplace_back(&w, "W");
  }
  ASSERT_NO_FATAL_FAILURE(CheckRound(views, dir_ + "/state1"));
  ASSERT_NO_FATAL_FAILURE(CheckRound(views, dir_ + "/state2", {"--device-map", "0=1,1=0"}));
}

TEST_F(LegacyIpcTest, HandleWithAWrongSecretMapsNothing) {
  Worker& a = Start("creator", 0);
  Worker& b = Start("opener", 0);
  ASSERT_THAT(Ask(a, "malloc V " + std::to_string(kBytes)), StartsWith("ok "));
  EXPECT_EQ(Open(a, "V", b, "W", 0, /*corrupt=*/true), "bad cuIpcOpenMemHandle(&v.va, handle, flags) = 400");
  EXPECT_THAT(Open(a, "V", b, "W", 0), StartsWith("ok "));
}

// The same questions asked of a process without the shim and of one with it give the same
// answers (addresses compared relative to each process's own pointer).
TEST_F(LegacyIpcTest, PointerAttributesAndRangesAreTheDriversWithAndWithoutTheShim) {
  struct Case {
    const char* make;  // the command making view V (or W, opened from V)
    size_t offset;     // where the questions are asked
  };
  const Case cases[] = {{"malloc V 1000", 0}, {"malloc V 1000", 999}, {"malloc V 3149824", 4097},
                        {"pitch V 1000 7", 2048}, {"ipc", 100}};
  std::vector<std::vector<std::string>> answers(2);
  for (int shim = 0; shim < 2; ++shim) {
    Worker& w = Start(shim ? "shim" : "bare", 1, !shim);
    Worker& peer = Start(shim ? "shim-peer" : "bare-peer", 0, !shim);
    for (const Case& c : cases) {
      std::string view = "V", made;
      if (std::string(c.make) == "ipc") {
        ASSERT_THAT(Ask(peer, "malloc P " + std::to_string(kBytes)), StartsWith("ok "));
        made = Open(peer, "P", w, "V", 0);
      } else {
        made = Ask(w, c.make);
      }
      ASSERT_THAT(made, StartsWith("ok ")) << c.make;
      const std::string va = OkValue(made).substr(0, OkValue(made).find(' '));
      std::string attrs = Ask(w, "attrs V " + std::to_string(c.offset));
      std::string range = Ask(w, "range V " + std::to_string(c.offset));
      for (std::string* s : {&attrs, &range}) {
        const size_t at = s->find(va);
        if (at != std::string::npos) s->replace(at, va.size(), "<base>");
      }
      answers[shim].push_back(std::string(c.make) + " @" + std::to_string(c.offset) + ": " + attrs + " | " + range);
      answers[shim].back() += " | " + Ask(w, std::string(c.make) == "ipc" ? "ipcclose V" : "free V");
    }
    answers[shim].push_back("malloc 0: " + Ask(w, "malloc Z 0"));
    Stop(peer);
    Stop(w);
  }
  for (size_t i = 0; i < answers[0].size(); ++i) EXPECT_EQ(answers[1][i], answers[0][i]);
  EXPECT_THAT(answers[0][0], StartsWith("malloc V 1000 @0: ok 1 0 1 <base> "));
}

TEST_F(LegacyIpcTest, ManagedMemoryIsRefusedByNameAtCheckpoint) {
  Worker& a = Start("managed", 0);
  ASSERT_EQ(Ask(a, "managed 4096"), "ok 0");
  const Ran refused = Checkpoint(dir_ + "/state");
  EXPECT_EQ(refused.status, kExitRefused);
  EXPECT_THAT(refused.err, HasSubstr("used cuMemAllocManaged (managed memory), whose memory cusnap cannot carry"));
  EXPECT_THAT(refused.err, HasSubstr("pid " + std::to_string(a.pid)));
}

}  // namespace
}  // namespace jobtest
