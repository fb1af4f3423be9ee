// 8-process jobs on 8 simulated devices through the real `cusnap` CLI (scale, the part the
// CPUs allow): all-to-all sharing (56 imports) with HOST_NUMA allocations, access for two
// devices and an allocation mapped at two VAs; three cycles in a row; a restore onto a
// rotated device map and back by UUID. Each cycle (job_harness.h, Cycle/Resume) checks the
// memory released in between, every byte and VA of every process, handles, access, which
// views share an allocation, and writes crossing between every pair of processes.
#include <gmock/gmock.h>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "scale_job.h"

namespace jobtest {
namespace {

constexpr size_t kRanks = static_cast<size_t>(kScaleRanks);

// Every rank creates one allocation (ranks 2 and 5 in host NUMA memory, the rest on their
// device) and imports the seven others: 56 imports. Rank 0 grants its own allocation to two
// devices and maps it at a second VA.
TEST_F(ScaleJob, EightRanksAllToAll) {
  const std::vector<Worker*> w = StartRanks(kScaleRanks);
  const auto host = [](size_t r) { return r == 2 || r == 5; };
  for (size_t r = 0; r < kRanks; ++r) {
    const std::string a = Numbered("A", static_cast<long long>(r)), dev = std::to_string(r);
    ASSERT_NO_FATAL_FAILURE(Create(*w[r], a, 2, host(r) ? "host" : "dev", host(r) ? 0 : static_cast<int>(r)));
    ASSERT_NO_FATAL_FAILURE(Map(*w[r], a, a, 0, 2, r == 0 ? "0,1" : dev));
    ASSERT_NO_FATAL_FAILURE(Fill(*w[r], a));
  }
  ASSERT_NO_FATAL_FAILURE(Map(*w[0], "A0-again", "A0", 0, 2, "0"));
  size_t imports = 0;
  for (size_t r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kRanks; ++i) {
      if (i == r) continue;
      const std::string a = Numbered("A", static_cast<long long>(i));
      ASSERT_NO_FATAL_FAILURE(Share(*w[i], a, *w[r]));
      ASSERT_NO_FATAL_FAILURE(Map(*w[r], a, a, 0, 2, std::to_string(r)));
      ++imports;
    }
  }
  ASSERT_EQ(imports, 56u);
  CheckEveryByte();
  // Both of rank 0's VAs are the same bytes before the cycle.
  CrossWrite(*w[0], "A0", *w[0], "A0-again");

  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
  CrossWrite(*w[0], "A0-again", *w[0], "A0");

  // The state file: 8 participants, each creator saved its 2 MiB (importers save nothing),
  // the host allocations included.
  const Ran shown = Cusnap({"inspect", state, "--json"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  const auto doc = nlohmann::json::parse(shown.out);
  ASSERT_EQ(doc["participants"].size(), kRanks);
  std::map<int, uint64_t> saved;
  for (const auto& p : doc["participants"]) saved[p["pid"].get<int>()] = p["saved_bytes"].get<uint64_t>();
  for (size_t r = 0; r < kRanks; ++r) EXPECT_EQ(saved[w[r]->pid], uint64_t{2} << 20) << w[r]->name;
}

// Three cycles in a row on one state directory, 8 ranks in a ring of imports; before each
// checkpoint every rank writes a marker into the allocation it imported, which its creator
// reads after the restore; then every byte, the layout, the memory and writes crossing.
TEST_F(ScaleJob, ThreeCyclesInARowAtEightRanks) {
  const std::vector<Worker*> w = StartRanks(kScaleRanks);
  ASSERT_NO_FATAL_FAILURE(BuildRing(w, "R", 1));
  CheckEveryByte();
  const std::string state = dir_ + "/state";
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    std::vector<std::string> originals;
    const std::string word = std::to_string(1000 + cycle);
    for (size_t r = 0; r < kRanks; ++r) {  // rank r+1 writes into R<r>_0
      const std::string view = Numbered("R", static_cast<long long>(r), "_0");
      Worker& importer = *w[(r + 1) % kRanks];
      originals.push_back(OkValue(Ask(importer, "read " + view + " " + word)));
      ASSERT_FALSE(originals.back().empty());
      const std::string marker = std::to_string(0xabc00000u + static_cast<unsigned>(cycle * 16 + static_cast<int>(r)));
      ASSERT_EQ(Ask(importer, "write " + view + " " + word + " " + marker), "ok");
    }
    const Snapshot before = Suspend(state);
    ASSERT_FALSE(HasFatalFailure());
    const Ran rs = Restore(state);
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    for (size_t r = 0; r < kRanks; ++r) {
      const std::string view = Numbered("R", static_cast<long long>(r), "_0");
      const std::string marker = std::to_string(0xabc00000u + static_cast<unsigned>(cycle * 16 + static_cast<int>(r)));
      EXPECT_EQ(Ask(*w[r], "read " + view + " " + word), "ok " + marker) << w[r]->name;
      ASSERT_EQ(Ask(*w[r], "write " + view + " " + word + " " + originals[r]), "ok");
    }
    EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
    EXPECT_EQ(Phases(), std::vector<std::string>(kRanks, "active"));
    CheckEveryByte();
    ExpectSameLayout(before, Snap());
    for (size_t r = 0; r < kRanks; ++r) {
      const std::string view = Numbered("R", static_cast<long long>(r), "_0");
      CrossWrite(*w[r], view, *w[(r + 1) % kRanks], view);
    }
  }
}

/// The words of a reply ("ok", then one per device for "uuids").
std::vector<std::string> Words(const std::string& reply) {
  std::istringstream in(reply);
  std::vector<std::string> words;
  for (std::string s; in >> s;) words.push_back(s);
  return words;
}

// Restore onto a rotated device map, 0=1,1=2,...,7=0, then back by UUID (the UUIDs the state
// file recorded). As on real GPUs (DRIVER-FACTS F7): every process keeps its ordinals,
// locations and access; the physical GPU behind ordinal k becomes GPU k+1; the memory in use
// moves with it.
TEST_F(ScaleJob, RestoreOntoRotatedDeviceMapThenBackByUuid) {
  const std::vector<Worker*> w = StartRanks(kScaleRanks);
  ASSERT_NO_FATAL_FAILURE(BuildRing(w, "D", 1));
  // 4 MiB more on device 0, so that the memory in use tells the GPUs apart.
  ASSERT_NO_FATAL_FAILURE(Create(*w[0], "E", 4, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(*w[0], "e", "E", 0, 4, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(*w[0], "e"));
  CheckEveryByte();
  const std::vector<std::string> home = Words(Ask(*w[0], "uuids"));  // "ok", then 8 UUIDs
  ASSERT_EQ(home.size(), kRanks + 1);
  std::string rotated_uuids = "ok", map;
  std::map<int, int> rotate, back;
  for (int k = 0; k < kScaleRanks; ++k) {
    const int next = (k + 1) % kScaleRanks;
    rotated_uuids += " " + home[static_cast<size_t>(next) + 1];
    map.append(k ? "," : "").append(Numbered("", k, "=")).append(std::to_string(next));  // see Numbered
    rotate[k] = next;
    back[next] = k;
  }
  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(Cycle(state, {"--device-map", map}, rotate));
  std::vector<uint64_t> home_use(kRanks, uint64_t{2} << 20), rotated_use = home_use;
  home_use[0] = rotated_use[1] = uint64_t{6} << 20;  // ordinal 0's memory is on GPU 1 now
  EXPECT_EQ(UsedBytes(), rotated_use);
  for (Worker* r : w) EXPECT_EQ(Ask(*r, "uuids"), rotated_uuids) << r->name;

  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const Ran shown = Cusnap({"inspect", state, "--json"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  std::map<int, std::string> uuids;  // ordinal -> the GPU behind it when checkpointed
  const auto recorded = nlohmann::json::parse(shown.out);
  for (const auto& p : recorded["participants"]) {
    for (const auto& g : p["gpus"]) uuids[g["ordinal"].get<int>()] = g["uuid"].get<std::string>();
  }
  ASSERT_EQ(uuids.size(), kRanks) << shown.out;
  // Ordinal k sits on GPU k+1; back home it sits on GPU k, which ordinal k-1 recorded.
  std::string by_uuid;
  for (int k = 0; k < kScaleRanks; ++k) {
    ASSERT_THAT(uuids[k], ::testing::StartsWith("GPU-"));
    by_uuid += (k ? "," : "") + uuids[k] + "=" + uuids[(k + kScaleRanks - 1) % kScaleRanks];
  }
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", by_uuid}, back));
  EXPECT_EQ(UsedBytes(), home_use);  // home again
  std::string home_uuids = "ok";
  for (size_t k = 1; k < home.size(); ++k) home_uuids += " " + home[k];
  for (Worker* r : w) EXPECT_EQ(Ask(*r, "uuids"), home_uuids) << r->name;
}

}  // namespace
}  // namespace jobtest
