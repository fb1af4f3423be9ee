// Jobs whose processes each see their own GPUs: ranks pinned to one GPU each by
// CUDA_VISIBLE_DEVICES (each calls its GPU "device 0"), a process that sees both GPUs in
// reversed order ("1,0"), one pinned by a UUID entry. Three checkpoint/restore cycles each,
// swapped by GPU index, back by UUID, swapped again (the CLI itself running with a
// CUDA_VISIBLE_DEVICES that must not change how it reads indices): every byte, VA, access
// descriptor and the memory per physical GPU checked (JobTest::Cycle). Then the refusals
// before anything changes (exit 5, the GPU named): incomplete, many-to-one, unknown target
// index and UUID, and a target GPU without room for what the restore reallocates there.
// Last, a restore onto swapped GPUs killed before and after its native restore: `cusnap
// recover --device-map` finishes it on the GPUs the map names.
#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

class CliJobVisible : public JobTest {
 protected:
  /// What `cusnap inspect --json` says each participant's GPUs are: pid -> ordinal -> UUID.
  std::map<int, std::map<int, std::string>> RecordedGpus(const std::string& state) {
    std::map<int, std::map<int, std::string>> out;
    const Ran shown = Cusnap({"inspect", state, "--json"});
    const auto doc = nlohmann::json::parse(shown.out, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc["participants"].is_array()) {
      ADD_FAILURE() << "inspect --json: " << shown.out << shown.err;
      return out;
    }
    for (const auto& p : doc["participants"]) {
      for (const auto& g : p["gpus"]) {
        out[p["pid"].get<int>()][g["ordinal"].get<int>()] = g["uuid"].get<std::string>();
      }
    }
    return out;
  }

  /// Two ranks pinned to GPU 0 and GPU 1 by CUDA_VISIBLE_DEVICES (each calls its GPU device
  /// 0): rank0 creates A (`a_mib`), rank1 B (`b_mib`), each maps the other's too (a ring of
  /// two, sharing both ways). Returns the machine's GPU UUIDs.
  std::vector<std::string> PinnedPair(size_t a_mib, size_t b_mib) {
    const std::vector<std::string> gpu = MachineUuids();
    EXPECT_EQ(gpu.size(), 2u);
    Worker& r0 = *(rank0_ = &Start("rank0", 0, false, "0", {0}));
    Worker& r1 = *(rank1_ = &Start("rank1", 0, false, "1", {1}));
    CreateFilled(r0, "A", a_mib, "dev", 0, "a", "0");
    CreateFilled(r1, "B", b_mib, "dev", 0, "b", "0");
    ShareMapped(r0, "A", r1, "a", a_mib, "0");
    ShareMapped(r1, "B", r0, "b", b_mib, "0");
    return gpu;
  }

  Worker* rank0_ = nullptr;  ///< PinnedPair's ranks
  Worker* rank1_ = nullptr;

  /// `cusnap <args> --state-dir <state>` with the job's target, SIGKILLed kSettleMs after a
  /// line of its output starts with `after`.
  Ran Killed(std::vector<std::string> args, const std::string& state, const std::string& after) {
    args.insert(args.begin() + 1, target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    return CusnapSignalled(args, after, SIGKILL, kSettleMs);
  }

  /// `cusnap recover` of the job with `extra`.
  Ran Recover(const std::string& state, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"recover"};
    args.insert(args.end(), target_.begin(), target_.end());
    args.insert(args.end(), {"--state-dir", state});
    args.insert(args.end(), extra.begin(), extra.end());
    return Cusnap(args);
  }

  static constexpr int kSettleMs = 150;

  /// "a=b,b=a" from UUIDs.
  static std::string SwapByUuid(const std::string& a, const std::string& b) {
    return a + "=" + b + "," + b + "=" + a;
  }
};

const std::map<int, int> kSwap = {{0, 1}, {1, 0}};

// Two ranks, each pinned to one GPU, sharing memory both ways (a ring of two).
TEST_F(CliJobVisible, RanksPinnedToOneGpuEachSwappedThreeTimes) {
  const std::vector<std::string> gpu = PinnedPair(4, 6);
  ASSERT_FALSE(HasFailure());
  Worker& r0 = *rank0_;
  Worker& r1 = *rank1_;
  const std::string state = dir_ + "/state";

  // 1: by index. Each rank's device 0 is now the other GPU.
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  // The state file names each rank's own device 0 by the GPU it really is.
  auto recorded = RecordedGpus(state);
  EXPECT_EQ(recorded[r0.pid], (std::map<int, std::string>{{0, gpu[0]}}));
  EXPECT_EQ(recorded[r1.pid], (std::map<int, std::string>{{0, gpu[1]}}));
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", "0=1,1=0"}, kSwap));
  const std::string hex0 = Ask(r1, "uuids"), hex1 = Ask(r0, "uuids");
  ASSERT_NE(hex0, hex1);

  // 2: back by UUID.
  const Snapshot second = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  recorded = RecordedGpus(state);
  EXPECT_EQ(recorded[r0.pid], (std::map<int, std::string>{{0, gpu[1]}}));
  EXPECT_EQ(recorded[r1.pid], (std::map<int, std::string>{{0, gpu[0]}}));
  ASSERT_NO_FATAL_FAILURE(
      Resume(state, second, {"--device-map", SwapByUuid(gpu[1], gpu[0])}, kSwap));
  EXPECT_EQ(Ask(r0, "uuids"), hex0);  // home again
  EXPECT_EQ(Ask(r1, "uuids"), hex1);

  // 3: by index again, the CLI pinned to GPU 1 itself: indices still name the machine's GPUs.
  cusnap_env_ = {"CUDA_VISIBLE_DEVICES=1"};
  ASSERT_NO_FATAL_FAILURE(Cycle(state, {"--device-map", "1=0,0=1"}, kSwap));
  EXPECT_EQ(Ask(r0, "uuids"), hex1);
  EXPECT_EQ(Ask(r1, "uuids"), hex0);
}

// A process on two GPUs listed out of PCI order ("1,0") and one pinned by a UUID entry.
TEST_F(CliJobVisible, ReversedOrderAndUuidEntryThreeCycles) {
  const std::vector<std::string> gpu = MachineUuids();
  ASSERT_EQ(gpu.size(), 2u);
  Worker& both = Start("both", 0, false, "1,0", {1, 0});
  Worker& pinned = Start("pinned", 0, false, gpu[0], {0});
  ASSERT_NO_FATAL_FAILURE(CreateFilled(both, "A", 4, "dev", 0, "a", "0,1"));  // on GPU 1
  ASSERT_NO_FATAL_FAILURE(CreateFilled(both, "B", 2, "dev", 1, "b", "1"));    // on GPU 0
  ASSERT_NO_FATAL_FAILURE(CreateFilled(pinned, "C", 2, "dev", 0, "c", "0"));  // on GPU 0
  ASSERT_NO_FATAL_FAILURE(ShareMapped(both, "A", pinned, "a", 4, "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(pinned, "C", both, "c", 2, "0,1"));
  const std::string both_home = Ask(both, "uuids");
  const std::string state = dir_ + "/state";

  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  auto recorded = RecordedGpus(state);
  EXPECT_EQ(recorded[both.pid], (std::map<int, std::string>{{0, gpu[1]}, {1, gpu[0]}}));
  EXPECT_EQ(recorded[pinned.pid], (std::map<int, std::string>{{0, gpu[0]}}));
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", "0=1,1=0"}, kSwap));
  const std::string both_swapped = Ask(both, "uuids");
  EXPECT_NE(both_swapped, both_home);
  ASSERT_NO_FATAL_FAILURE(Cycle(state, {"--device-map", SwapByUuid(gpu[0], gpu[1])}, kSwap));
  EXPECT_EQ(Ask(both, "uuids"), both_home);
  ASSERT_NO_FATAL_FAILURE(Cycle(state, {"--device-map", "0=1,1=0"}, kSwap));
  EXPECT_EQ(Ask(both, "uuids"), both_swapped);
}

// Maps that cannot be applied are refused before anything changes, naming the GPU; the
// complete map then works.
TEST_F(CliJobVisible, BadMapsRefusedNamingTheGpu) {
  const std::vector<std::string> gpu = PinnedPair(2, 2);
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  const std::string nowhere = "GPU-00000000-1111-2222-3333-444444444444";
  struct Case {
    std::string map, names;
  };
  const std::vector<Case> cases = {
      {"0=1", "device map is incomplete: it moves device 0 (" + gpu[0] + ") onto device 1 (" +
                  gpu[1] + ") but does not say where device 1 (" + gpu[1] +
                  "), which the checkpoint also uses, goes"},
      {"0=1,1=1", "device map restores two devices onto device 1 (" + gpu[1] + ")"},
      {"0=2,1=0", "device map names device 2, but the driver has 2 device(s)"},
      {gpu[0] + "=" + nowhere + "," + gpu[1] + "=" + gpu[0],
       "device map names " + nowhere + ", which the driver does not list"},
  };
  for (const auto& c : cases) {
    const Ran r = Restore(state, {"--device-map", c.map});
    EXPECT_EQ(r.status, kExitRestoreRefused) << c.map << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << c.map;
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed")) << c.map;
  }
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", "0=1,1=0"}, kSwap));
}

// A target GPU without room for the allocations the restore moves onto it: refused before
// the native restore (which would leave the process stuck on a full GPU), naming the GPU,
// the bytes needed and the bytes free; with the room made, the same restore works.
TEST_F(CliJobVisible, TargetGpuWithoutRoomRefused) {
  // 64 MiB per GPU, for every process of this test (and none after it).
  struct SmallGpus {
    SmallGpus() { ::setenv("SIMCUDA_DEVICE_MEMORY_MIB", "64", 1); }
    ~SmallGpus() { ::unsetenv("SIMCUDA_DEVICE_MEMORY_MIB"); }
  } small_gpus;
  target_ = {"--all"};  // the process holding GPU 1 is no participant
  const std::vector<std::string> gpu = PinnedPair(40, 8);
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  // Another program takes 30 MiB of GPU 1 while the job is suspended: 34 MiB stay free there,
  // the 40 MiB of A would not fit.
  Worker& hog = Start("hog", 1, /*bare=*/true);
  ASSERT_THAT(Ask(hog, "create H 30 dev 1"), ::testing::StartsWith("ok "));
  const Ran r = Restore(state, {"--device-map", "0=1,1=0"});
  EXPECT_EQ(r.status, kExitRestoreRefused) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("the device map moves 41943040 bytes (40.00 MiB) of allocations "
                               "onto GPU 1 (" + gpu[1] + "), which has 35651584 bytes "
                               "(34.00 MiB) free"));
  EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed"));
  EXPECT_EQ(Stop(hog), 0);
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", "0=1,1=0"}, kSwap));
}

// A restore onto swapped GPUs killed while its native restore is about to run (no process
// restored natively yet): recover without the job's state file cannot know its GPUs and is
// refused, nothing changed; `recover --device-map` with the state file restores every
// process natively onto the GPUs the map names and finishes: the job runs on swapped GPUs.
TEST_F(CliJobVisible, RestoreKilledBeforeItsNativeRestoreIsRecoveredOntoTheMappedGpus) {
  PinnedPair(4, 6);
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  // The killed command's lease outlives the test (cli_job_recover.cc says why).
  cusnap_env_ = {"SIMCUDA_DELAYS=cuCheckpointProcessRestore:1500", "CUSNAP_LEASE_MS=600000"};
  const Ran killed = Killed({"restore", "--device-map", "0=1,1=0"}, state, "match ");
  cusnap_env_.clear();
  EXPECT_EQ(killed.status, -1) << killed.out << killed.err;
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());

  const Ran no_state = Recover(dir_ + "/elsewhere", {"--device-map", "0=1,1=0"});
  EXPECT_EQ(no_state.status, kExitRestoreRefused) << no_state.out << no_state.err;
  EXPECT_THAT(no_state.err, HasSubstr("--device-map needs the checkpoint's state file"));
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());

  const Ran rc = Recover(state, {"--device-map", "0=1,1=0"});
  ASSERT_EQ(rc.status, 0) << rc.out << rc.err;
  EXPECT_THAT(rc.err, HasSubstr("rolling every participant forward"));
  ASSERT_NO_FATAL_FAILURE(ExpectResumed(before, kSwap));
  ASSERT_NO_FATAL_FAILURE(Cycle(state));  // and the job goes on where it now is
}

// The same restore killed after its native restore (the processes are on the swapped GPUs,
// their shims not yet reallocated): `recover` given the interrupted restore's map again
// (the README's advice) restores nobody natively a second time, checks that each process's
// device 0 is the GPU the map moved it to, and finishes there.
TEST_F(CliJobVisible, RestoreKilledAfterItsNativeRestoreIsRecoveredWhereItIs) {
  PinnedPair(4, 6);
  ASSERT_FALSE(HasFailure());
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  cusnap_env_ = {"SIMCUDA_DELAYS=cuCheckpointProcessUnlock:1500", "CUSNAP_LEASE_MS=600000"};
  const Ran killed = Killed({"restore", "--device-map", "0=1,1=0"}, state, "restore ");
  cusnap_env_.clear();
  EXPECT_EQ(killed.status, -1) << killed.out << killed.err;
  for (Worker* w : Live()) EXPECT_EQ(NativeState(w->pid), kStateLocked) << w->name;

  const Ran rc = Recover(state, {"--device-map", "0=1,1=0"});
  ASSERT_EQ(rc.status, 0) << rc.out << rc.err;
  EXPECT_THAT(rc.err, HasSubstr("rolling every participant forward"));
  ASSERT_NO_FATAL_FAILURE(ExpectResumed(before, kSwap));
}

}  // namespace
}  // namespace jobtest
