// The kinds of VMM use that real workloads bring (issue 4; DRIVER-FACTS, "How NCCL 2.28.9 and
// PyTorch 2.11 call the VMM API"), each on the simulated driver through the real shim and the
// real `cusnap checkpoint` / `restore`: two ranks (workload_kinds_worker, device 0 and 1)
// started with `cusnap run`, every byte sample and the sharing checked after restore.
#include <cuda.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "workload_kinds_harness.h"

namespace workload {
namespace {

using ::testing::HasSubstr;

// NCCL's proxy pattern: the creator's main thread sends the handle VALUE to the peer; the
// peer sends it back in a request that the creator's proxy thread (another thread, no
// context current) serves with cuMemExportToShareableHandle; the peer imports the ticket.
TEST_F(WorkloadKindsTest, ProxyThreadExportsAHandleValueThePeerSentBack) {
  StartRanks();
  const std::string handle = Ok(a_, "create buf 4 dev");
  Ok(a_, "map buf");
  auto proxy_round = [&](const std::string& as) {
    Ok(a_, "proxy_start");
    Ok(b_, "request " + as + " " + handle);
    std::istringstream tids(Ok(a_, "proxy_join"));
    long proxy_tid = 0, main_tid = 0;
    tids >> proxy_tid >> main_tid;
    EXPECT_NE(proxy_tid, main_tid) << "the export must come from the proxy thread";
    EXPECT_EQ(Ask(b_, "check " + as), "ok") << "b reads a's bytes through the proxied import";
  };
  proxy_round("buf");
  CrossWrite(a_, "buf", b_, "buf", 1);
  Ok(a_, "poke buf 7");  // the word the restore must keep

  Cycle();
  EXPECT_EQ(Ok(a_, "handle buf"), handle) << "the application's handle value is kept";
  EXPECT_EQ(Ok(b_, "peek buf"), "7");
  CrossWrite(a_, "buf", b_, "buf", 2);
  // After restore the proxy exports the same handle value again (a natively restored
  // allocation could not be: DRIVER-FACTS F3); b imports it a second time.
  proxy_round("buf_again");
  StopRanks();
}

// PyTorch symmetric memory retains by address inside mapped blocks (~194 per rank): each
// retain returns the mapped handle; retains held across checkpoint/restore stay valid, give
// the same value afterwards, and every one of them can be released.
TEST_F(WorkloadKindsTest, RetainsByAddressSurviveACycleWithTheSameHandleValues) {
  StartRanks();
  const std::string a_handle = Ok(a_, "create blk 8 dev");
  Ok(a_, "map blk");
  Ok(a_, "export blk");
  const std::string b_handle = Ok(b_, "import blk");
  for (Rank* r : {&a_, &b_}) {
    const std::string mapped = r == &a_ ? a_handle : b_handle;
    EXPECT_EQ(Ok(*r, "retain blk 200"), mapped) << r->name;
    EXPECT_EQ(Ok(*r, "unretain blk 100"), "100") << r->name;  // 100 kept across the cycle
  }

  Cycle();
  for (Rank* r : {&a_, &b_}) {
    const std::string mapped = r == &a_ ? a_handle : b_handle;
    EXPECT_EQ(Ok(*r, "handle blk"), mapped) << r->name;
    EXPECT_EQ(Ok(*r, "retain blk 200"), mapped) << r->name << ": same value after restore";
    EXPECT_EQ(Ok(*r, "unretain blk 300"), "0") << r->name;
    EXPECT_EQ(Ask(*r, "check blk"), "ok") << r->name;
  }
  CrossWrite(a_, "blk", b_, "blk", 3);
  // Every retain reference is gone: unmapping and one release free it, a second release fails.
  EXPECT_EQ(Ask(b_, "free blk"), "ok");
  EXPECT_EQ(Ask(a_, "free blk"), "ok");
  StopRanks();
}

// NCCL creates, exports and imports HOST_NUMA allocations (2 per rank).
TEST_F(WorkloadKindsTest, HostNumaAllocationCreatedExportedImportedAndRestored) {
  StartRanks();
  Ok(a_, "create host 4 host");
  Ok(a_, "map host");
  Ok(a_, "export host");
  Ok(b_, "import host");
  EXPECT_EQ(Ask(b_, "check host"), "ok");
  const std::string range_a = Ok(a_, "range host");
  const std::string range_b = Ok(b_, "range host");

  Cycle();
  for (Rank* r : {&a_, &b_}) {
    EXPECT_EQ(Ask(*r, "check host"), "ok") << r->name;
    EXPECT_EQ(Ok(*r, "location host"), std::to_string(CU_MEM_LOCATION_TYPE_HOST_NUMA) + " 0") << r->name;
  }
  EXPECT_EQ(Ok(a_, "range host"), range_a);
  EXPECT_EQ(Ok(b_, "range host"), range_b);
  CrossWrite(a_, "host", b_, "host", 4);
  StopRanks();
}

// Allocations created while no context is current (NCCL's and PyTorch's setup code may do
// this): rank a creates one before any context exists in the process, rank b one while its
// context is not current; both are mapped and exported with a context current afterwards.
TEST_F(WorkloadKindsTest, AllocationCreatedWithNoCurrentContext) {
  StartRanks(/*a_without_context=*/true);
  Ok(a_, "create bare 4 dev");
  Ok(a_, "context");
  Ok(a_, "map bare");
  Ok(a_, "export bare");
  Ok(b_, "import bare");
  Ok(b_, "create bare_b 2 host nocontext");
  Ok(b_, "map bare_b");
  Ok(b_, "export bare_b");
  Ok(a_, "import bare_b");

  Cycle();
  for (Rank* r : {&a_, &b_}) {
    EXPECT_EQ(Ask(*r, "check bare"), "ok") << r->name;
    EXPECT_EQ(Ask(*r, "check bare_b"), "ok") << r->name;
  }
  CrossWrite(a_, "bare", b_, "bare", 5);
  CrossWrite(b_, "bare_b", a_, "bare_b", 6);
  StopRanks();
}

// cuMemGetAddressRange inside tracked mappings (creator and importer): the whole mapping,
// the same base and size after restore, also after a restore onto swapped GPUs (which keeps
// each process's ordinals: DRIVER-FACTS F7), where writes still cross between the ranks.
TEST_F(WorkloadKindsTest, AddressRangeOfTrackedMappingsIsKeptByRestore) {
  StartRanks();
  Ok(a_, "create r 6 dev");
  const std::string mapped_a = Ok(a_, "map r");
  Ok(a_, "export r");
  Ok(b_, "import r");
  const std::string range_a = Ok(a_, "range r");
  const std::string range_b = Ok(b_, "range r");
  EXPECT_EQ(range_a, mapped_a + " " + std::to_string(6 << 20)) << "base = the mapping's VA, size = 6 MiB";
  EXPECT_THAT(range_b, HasSubstr(" " + std::to_string(6 << 20)));

  Cycle();
  EXPECT_EQ(Ok(a_, "range r"), range_a);
  EXPECT_EQ(Ok(b_, "range r"), range_b);
  Cycle({"--device-map", "0=1,1=0"});
  EXPECT_EQ(Ok(a_, "range r"), range_a);
  EXPECT_EQ(Ok(b_, "range r"), range_b);
  for (Rank* r : {&a_, &b_}) EXPECT_EQ(Ask(*r, "check r"), "ok") << r->name;
  CrossWrite(a_, "r", b_, "r", 8);
  StopRanks();
}

// Hundreds of tracked allocations per rank (NCCL: ~147 created, 48 imported): a cycle with
// 300 created + 60 imported per rank must cost less than 30x one with 30 + 6 (ten times the
// allocations and bytes; a linear cost gives about 10x, quadratic per-allocation work 100x).
// Each size runs two cycles and the faster counts: noise of a loaded machine only adds time,
// and the first cycle also provides the host carrier, which the second reuses.
TEST_F(WorkloadKindsTest, HundredsOfAllocationsPerRankKeepThePhasesLinear) {
  constexpr int kCycles = 2;
  auto measure = [&](int count) {
    StartRanks();
    const int shared = count / 5;
    OkBoth("many m " + std::to_string(count) + " 2");
    Ok(a_, "exportmany m " + std::to_string(shared));
    Ok(b_, "importmany from_a " + std::to_string(shared));
    Ok(b_, "exportmany m " + std::to_string(shared));
    Ok(a_, "importmany from_b " + std::to_string(shared));
    double best_ck = 1e30, best_rs = 1e30;
    for (int cycle = 0; cycle < kCycles; ++cycle) {
      const auto [ck, rs] = Cycle();
      best_ck = std::min(best_ck, ck.PhaseMs());
      best_rs = std::min(best_rs, rs.PhaseMs());
      const auto [checked_a, checked_b] = OkBoth("checkall");
      EXPECT_EQ(checked_a, std::to_string(count + shared)) << count << " allocations";
      EXPECT_EQ(checked_b, std::to_string(count + shared)) << count << " allocations";
    }
    CrossWrite(a_, "m0", b_, "from_a0", 7);
    StopRanks();
    std::printf("[ measure  ] %d allocations + %d imported per rank: checkpoint phases %.1f ms, restore "
                "phases %.1f ms (best of %d cycles)\n", count, shared, best_ck, best_rs, kCycles);
    return std::pair{best_ck, best_rs};
  };
  const auto [ck30, rs30] = measure(30);
  const auto [ck300, rs300] = measure(300);
  EXPECT_GT(ck30, 0.0);
  EXPECT_GT(rs30, 0.0);
  EXPECT_LT(ck300, 30 * ck30) << "checkpoint: 300 allocations per rank cost " << ck300 << " ms, 30 cost " << ck30;
  EXPECT_LT(rs300, 30 * rs30) << "restore: 300 allocations per rank cost " << rs300 << " ms, 30 cost " << rs30;
}

}  // namespace
}  // namespace workload
