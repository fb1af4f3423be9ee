// `cusnap checkpoint` + `cusnap restore` of multi-process jobs that share VMM memory, on the
// simulated driver, with the real `cusnap` binary and job_worker processes started through
// `cusnap run`. Each cycle (job_harness.h, Cycle) checks that GPU memory was released in
// between, then every byte and every VA of every process, the application's handles, access
// rights, which views share an allocation, and that writes cross between processes.
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

class CliJobCycle : public JobTest {
 protected:
  /// `w` creates `allocation` (`mib` MiB, `where` `id` as in Create), maps it whole as `view`
  /// with access for `devices` and fills it with its pattern.
  void CreateFilled(Worker& w, const std::string& allocation, size_t mib, const char* where, int id,
                    const std::string& view, const std::string& devices) {
    ASSERT_NO_FATAL_FAILURE(Create(w, allocation, mib, where, id));
    ASSERT_NO_FATAL_FAILURE(Map(w, view, allocation, 0, mib, devices));
    ASSERT_NO_FATAL_FAILURE(Fill(w, view));
  }

  /// `from` shares `allocation` with `to`, which maps `mib` MiB of it from `offset_mib` as
  /// `view` with access for `devices`.
  void ShareMapped(Worker& from, const std::string& allocation, Worker& to, const std::string& view,
                   size_t offset_mib, size_t mib, const std::string& devices) {
    ASSERT_NO_FATAL_FAILURE(Share(from, allocation, to));
    ASSERT_NO_FATAL_FAILURE(Map(to, view, allocation, offset_mib, mib, devices));
  }

  /// Bytes each participant (by pid) saved, as `cusnap inspect --json` reads the state file.
  std::map<int, uint64_t> SavedBytes(const std::string& state) {
    const Ran shown = Cusnap({"inspect", state, "--json"});
    EXPECT_EQ(shown.status, 0) << shown.err;
    std::map<int, uint64_t> saved;
    const auto doc = nlohmann::json::parse(shown.out);
    for (const auto& p : doc["participants"]) saved[p["pid"].get<int>()] = p["saved_bytes"].get<uint64_t>();
    return saved;
  }
};

// A creator and an importer: one allocation on each device and one in host NUMA memory; the
// first mapped twice in the creator and at an offset in both processes, with access granted
// to two devices; the importer maps all three.
TEST_F(CliJobCycle, TwoProcessesEveryByteAndVa) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 4, "dev", 0, "a", "0,1"));  // two devices
  ASSERT_NO_FATAL_FAILURE(Map(creator, "a-again", "A", 0, 4, "0"));            // a second VA
  ASSERT_NO_FATAL_FAILURE(Map(creator, "a-upper", "A", 2, 2, "1"));            // at an offset
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "B", 2, "dev", 1, "b", "1"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "H", 2, "host", 0, "h", "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "A", importer, "a", 0, 4, "1"));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "a-upper", "A", 2, 2, "0,1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "B", importer, "b", 0, 2, "0,1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "H", importer, "h", 0, 2, "1"));
  CheckEveryByte();

  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(Cycle(state));

  // The state file recorded both processes and the creator's 8 MiB (importers save nothing).
  std::map<int, uint64_t> saved = SavedBytes(state);
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[creator.pid], uint64_t{8} << 20);
  EXPECT_EQ(saved[importer.pid], 0u);
}

// Four processes found through --all: each creates an allocation (on alternating devices)
// and imports the other three, so every allocation is imported by three processes and every
// process both creates and imports.
TEST_F(CliJobCycle, FourProcessesEachCreateAndImportAll) {
  target_ = {"--all"};
  std::vector<Worker*> w;
  for (int i = 0; i < 4; ++i) w.push_back(&Start("worker" + std::to_string(i), i % 2));
  for (int i = 0; i < 4; ++i) {
    const std::string a = Numbered("A", i);
    ASSERT_NO_FATAL_FAILURE(CreateFilled(*w[i], a, 2, "dev", i % 2, a, std::to_string(i % 2)));
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (i == j) continue;
      const std::string a = Numbered("A", i);
      ASSERT_NO_FATAL_FAILURE(ShareMapped(*w[i], a, *w[j], a, 0, 2, std::to_string(j % 2)));
    }
  }
  CheckEveryByte();
  ASSERT_NO_FATAL_FAILURE(Cycle(dir_ + "/state"));
}

// Three cycles in a row on one state directory; a word written before each checkpoint is read
// back by the other process after the restore.
TEST_F(CliJobCycle, ThreeCyclesInARow) {
  Worker& left = Start("left", 0);
  Worker& right = Start("right", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(left, "L", 2, "dev", 0, "l", "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(right, "R", 4, "dev", 1, "r", "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(left, "L", right, "l", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(right, "R", left, "r", 0, 4, "0"));
  CheckEveryByte();
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const std::string word = std::to_string(1000 + cycle);
    const std::string marker = std::to_string(0xabc00000u + static_cast<unsigned>(cycle));
    const std::string original = OkValue(Ask(left, "read r " + word));
    ASSERT_FALSE(original.empty());
    ASSERT_EQ(Ask(left, "write r " + word + " " + marker), "ok");
    const Snapshot before = Suspend(dir_ + "/state");
    ASSERT_FALSE(HasFatalFailure());
    const Ran rs = Restore(dir_ + "/state");
    ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
    EXPECT_EQ(Ask(right, "read r " + word), "ok " + marker);  // written before the checkpoint
    ASSERT_EQ(Ask(right, "write r " + word + " " + original), "ok");
    CheckEveryByte();
    ExpectSameLayout(before, Snap());
    CrossWrite(left, "l", right, "l");
    CrossWrite(right, "r", left, "r");
  }
}

// Restore onto the other GPUs: by ordinal (0=1,1=0), then back by UUID (the UUIDs the state
// file recorded). As measured on 2x H200 (DRIVER-FACTS F7): every process keeps its ordinals,
// locations and access (the layout is unchanged), the GPU behind each ordinal (its UUID) is
// the other one, and the device memory in use moves between the physical GPUs.
TEST_F(CliJobCycle, RestoreWithDeviceMapByOrdinalAndUuid) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 4, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "B", 2, "dev", 1, "b", "0,1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "A", importer, "a", 2, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "B", importer, "b", 0, 2, "1"));
  CheckEveryByte();
  std::vector<std::string> home;  // "ok", the UUID of ordinal 0, of ordinal 1
  std::istringstream words(Ask(creator, "uuids"));
  for (std::string w; words >> w;) home.push_back(w);
  ASSERT_EQ(home.size(), 3u);
  ASSERT_NE(home[1], home[2]);
  ASSERT_EQ(Ask(importer, "uuids"), Ask(creator, "uuids"));
  const std::string swapped_uuids = "ok " + home[2] + " " + home[1];
  const std::map<int, int> swap = {{0, 1}, {1, 0}};
  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(Cycle(state, {"--device-map", "0=1,1=0"}, swap));
  EXPECT_EQ(UsedBytes(), (std::vector<uint64_t>{2u << 20, 4u << 20}));
  EXPECT_EQ(Ask(creator, "uuids"), swapped_uuids);  // ordinal 0 is the other GPU now
  EXPECT_EQ(Ask(importer, "uuids"), swapped_uuids);

  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const Ran shown = Cusnap({"inspect", state, "--json"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  std::map<int, std::string> uuids;
  const auto recorded = nlohmann::json::parse(shown.out);
  for (const auto& p : recorded["participants"]) {
    for (const auto& g : p["gpus"]) uuids[g["ordinal"].get<int>()] = g["uuid"].get<std::string>();
  }
  ASSERT_EQ(uuids.size(), 2u) << shown.out;
  ASSERT_THAT(uuids[0], ::testing::StartsWith("GPU-"));
  ASSERT_NE(uuids[0], uuids[1]);
  const std::string by_uuid = uuids[0] + "=" + uuids[1] + "," + uuids[1] + "=" + uuids[0];
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", by_uuid}, swap));
  EXPECT_EQ(UsedBytes(), (std::vector<uint64_t>{4u << 20, 2u << 20}));  // home again
  EXPECT_EQ(Ask(creator, "uuids"), "ok " + home[1] + " " + home[2]);
  EXPECT_EQ(Ask(importer, "uuids"), "ok " + home[1] + " " + home[2]);
}

// HOST_NUMA allocations only: created by one process, imported by the other, mapped with
// access for both devices; the carrier saves and restores them like device memory.
TEST_F(CliJobCycle, HostNumaAllocations) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "H1", 2, "host", 0, "h1", "0,1"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "H2", 4, "host", 0, "h2", "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "H1", importer, "h1", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "H2", importer, "h2-upper", 2, 2, "0,1"));
  CheckEveryByte();
  const std::string state = dir_ + "/state";
  ASSERT_NO_FATAL_FAILURE(Cycle(state));
  uint64_t saved = 0;
  for (const auto& [pid, bytes] : SavedBytes(state)) saved += bytes;
  EXPECT_EQ(saved, uint64_t{6} << 20);
}

// The job's root is a launcher started with `cusnap run` that never uses CUDA and forks the
// workers (they inherit the shim from it): `--pid <launcher>` finds the launcher and both
// workers; the launcher takes part in the lifecycle phases but gets no native calls.
TEST_F(CliJobCycle, LauncherUnderCusnapRunForksTheWorkers) {
  const std::vector<Worker*> job = StartLaunched("worker", {0, 1});
  ASSERT_EQ(job.size(), 3u);
  ASSERT_GT(job[1]->pid, 0);
  ASSERT_GT(job[2]->pid, 0);
  target_ = {"--pid", std::to_string(job[0]->pid)};
  Worker &first = *job[1], &second = *job[2];
  ASSERT_NO_FATAL_FAILURE(CreateFilled(first, "A", 2, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(second, "B", 2, "dev", 1, "b", "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(first, "A", second, "a", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(second, "B", first, "b", 0, 2, "0,1"));
  CheckEveryByte();
  EXPECT_EQ(Phases().size(), 3u);  // the launcher has an endpoint too
  ASSERT_NO_FATAL_FAILURE(Cycle(dir_ + "/state"));
}

}  // namespace
}  // namespace jobtest
