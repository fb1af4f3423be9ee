// The whole unicast checkpoint/restore cycle, shim side, across processes (no CLI): a
// creator and an importer (lifecycle_cycle_peer) run with the shim preloaded over the
// simulated driver; this test drives their endpoints with endpoint_client.h through
// QUIESCE .. RELEASE, takes the native lock + checkpoint + restore + unlock itself through
// the simulated driver's cuCheckpointProcess* API, then REALLOCATE, IMPORT, the multicast
// steps and ACTIVATE. Twice, so the carrier arena is reused. After each cycle every byte,
// every VA and every INSPECT record is what it was, a write in one process is read by the
// other, and an application call made during the window waited for ACTIVATE.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "carrier_sim_driver.h"
#include "common/endpoint_client.h"
#include "printers.h"
#include "scratch_dir.h"
#include "simcuda/introspection.h"

extern char** environ;

namespace cusnap {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using proto::Op;
using Phase = proto::ShimState;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int kRequestTimeoutMs = 60'000;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// One peer process and the pipes to its stdin and stdout.
struct Peer {
  pid_t pid = -1;
  FILE* in = nullptr;   // its stdin
  FILE* out = nullptr;  // its stdout
  std::string name;

  std::string Line() {
    char line[512];
    if (std::fgets(line, sizeof line, out) == nullptr) return "<eof>";
    std::string text(line);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  void Send(const std::string& command) {
    std::fprintf(in, "%s\n", command.c_str());
    std::fflush(in);
  }
  std::string Ask(const std::string& command) {
    Send(command);
    return Line();
  }
  // True when a reply line is waiting (no wait).
  bool ReplyPending() {
    pollfd p{fileno(out), POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }
};

class LifecycleCycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    control_dir_ = testing::MakeScratchDir("ctl");
    sim_dir_ = testing::MakeScratchDir("sim");
    ASSERT_FALSE(control_dir_.empty());
    ASSERT_FALSE(sim_dir_.empty());
    // This process talks to the peers' simulated drivers (checkpoint service, ledger).
    setenv("SIMCUDA_DIR", sim_dir_.c_str(), 1);
    ASSERT_FALSE(Env("CUSNAP_TEST_SHIM").empty()) << "run through ctest";
    int tickets[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, tickets), 0);
    Spawn(creator_, "creator", tickets[0]);
    Spawn(importer_, "importer", tickets[1]);
    close(tickets[0]);
    close(tickets[1]);
    // Each peer says "ok" once it has set up and checked its bytes.
    ASSERT_EQ(creator_.Line(), "ok");
    ASSERT_EQ(importer_.Line(), "ok");
  }

  void TearDown() override {
    for (Peer* peer : {&creator_, &importer_}) {
      if (peer->pid <= 0) continue;
      peer->Send("exit");
      int status = 0;
      waitpid(peer->pid, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << peer->name << " ended with status " << status;
      std::fclose(peer->in);
      std::fclose(peer->out);
    }
    std::error_code ignored;
    if (!control_dir_.empty()) std::filesystem::remove_all(control_dir_, ignored);
    if (!sim_dir_.empty()) std::filesystem::remove_all(sim_dir_, ignored);
  }

  void Spawn(Peer& peer, const char* role, int ticket_fd) {
    int to_child[2], from_child[2];
    ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(from_child, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_adddup2(&actions, ticket_fd, 3);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 || std::strncmp(*e, "SIMCUDA_DIR=", 12) == 0 ||
          std::strncmp(*e, "CUSNAP_CONTROL_DIR=", 19) == 0 ||
          std::strncmp(*e, "CUSNAP_CARRIER=", 15) == 0 ||
          std::strncmp(*e, "SIMCUDA_FAULTS=", 15) == 0) {
        continue;
      }
      env_strings.emplace_back(*e);
    }
    env_strings.push_back("LD_PRELOAD=" + Env("CUSNAP_TEST_SHIM"));
    env_strings.push_back("LD_LIBRARY_PATH=" + Env("CUSNAP_TEST_SIMCUDA_DIR"));
    env_strings.push_back("SIMCUDA_DIR=" + sim_dir_);
    env_strings.push_back("CUSNAP_CONTROL_DIR=" + control_dir_);
    if (!carrier_mode_.empty()) env_strings.push_back("CUSNAP_CARRIER=" + carrier_mode_);
    if (std::strcmp(role, "creator") == 0 && !creator_faults_.empty()) {
      env_strings.push_back("SIMCUDA_FAULTS=" + creator_faults_);
    }
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string program = Env("CUSNAP_TEST_BIN_DIR") + "/lifecycle_cycle_peer";
    char* argv[] = {program.data(), const_cast<char*>(role), nullptr};
    const int spawned = posix_spawn(&peer.pid, program.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    ASSERT_EQ(spawned, 0) << program;
    peer.in = fdopen(to_child[1], "w");
    peer.out = fdopen(from_child[0], "r");
    peer.name = std::string(role) + " (pid " + std::to_string(peer.pid) + ")";
  }

  // One lifecycle request to `peer`'s endpoint, its error kept.
  Result<proto::StepReply> Step(Peer& peer, Op op) {
    return Request<proto::StepReply>(EndpointPath(control_dir_, peer.pid),
                                     proto::StepRequest{op, 0, ""}.Encode(), kRequestTimeoutMs, op);
  }
  // The same; fails the test on an error reply.
  proto::StepReply Drive(Peer& peer, Op op) {
    Result<proto::StepReply> reply = Step(peer, op);
    EXPECT_TRUE(reply.ok()) << peer.name << " op " << static_cast<int>(op) << ": "
                            << (reply.ok() ? "" : reply.error().message);
    return reply.ok() ? *reply : proto::StepReply{};
  }
  proto::IdentifyReply Identify(Peer& peer) {
    Result<proto::IdentifyReply> reply = Request<proto::IdentifyReply>(
        EndpointPath(control_dir_, peer.pid), proto::IdentifyRequest{}.Encode(), kRequestTimeoutMs);
    EXPECT_TRUE(reply.ok()) << peer.name << ": " << (reply.ok() ? "" : reply.error().message);
    return reply.ok() ? *reply : proto::IdentifyReply{};
  }
  std::vector<proto::Record> Inspect(Peer& peer) {
    Result<proto::InspectReply> reply = Request<proto::InspectReply>(
        EndpointPath(control_dir_, peer.pid), proto::InspectRequest{}.Encode(), kRequestTimeoutMs);
    EXPECT_TRUE(reply.ok()) << peer.name << ": " << (reply.ok() ? "" : reply.error().message);
    return reply.ok() ? reply->records : std::vector<proto::Record>{};
  }
  void DriveBoth(Op op, Phase expected) {
    for (Peer* peer : {&creator_, &importer_}) {
      const proto::StepReply reply = Drive(*peer, op);
      EXPECT_EQ(reply.state, expected) << peer->name << " op " << static_cast<int>(op);
    }
  }

  template <typename Fn>
  Fn Native(const char* name) {
    auto fn = reinterpret_cast<Fn>(test::SimSymbol(name));
    EXPECT_NE(fn, nullptr) << name;
    return fn;
  }

  // The native lock + checkpoint + restore + unlock the coordinator would run.
  void NativeCycle(bool swap_devices) {
    auto lock = Native<CUresult (*)(int, CUcheckpointLockArgs*)>("cuCheckpointProcessLock");
    auto checkpoint =
        Native<CUresult (*)(int, CUcheckpointCheckpointArgs*)>("cuCheckpointProcessCheckpoint");
    auto restore = Native<CUresult (*)(int, CUcheckpointRestoreArgs*)>("cuCheckpointProcessRestore");
    auto unlock = Native<CUresult (*)(int, CUcheckpointUnlockArgs*)>("cuCheckpointProcessUnlock");
    auto state = Native<CUresult (*)(int, CUprocessState*)>("cuCheckpointProcessGetState");
    for (Peer* peer : {&creator_, &importer_}) {
      CUcheckpointLockArgs lock_args{};
      lock_args.timeoutMs = 30'000;
      ASSERT_EQ(lock(peer->pid, &lock_args), CUDA_SUCCESS) << peer->name;
    }
    for (Peer* peer : {&creator_, &importer_}) {
      CUcheckpointCheckpointArgs args{};
      ASSERT_EQ(checkpoint(peer->pid, &args), CUDA_SUCCESS) << peer->name;
      CUprocessState now{};
      ASSERT_EQ(state(peer->pid, &now), CUDA_SUCCESS);
      EXPECT_EQ(now, CU_PROCESS_STATE_CHECKPOINTED) << peer->name;
    }
    // Without the shim's release, the importer's restore fails here (DRIVER-FACTS F5).
    CUcheckpointGpuPair pairs[2] = {};
    if (swap_devices) {
      (void)test::SimDriver();  // cuInit: the UUIDs come from this process's driver
      auto uuid = Native<CUresult (*)(CUuuid*, CUdevice)>("cuDeviceGetUuid_v2");
      ASSERT_EQ(uuid(&pairs[0].oldUuid, 0), CUDA_SUCCESS);
      ASSERT_EQ(uuid(&pairs[0].newUuid, 1), CUDA_SUCCESS);
      pairs[1].oldUuid = pairs[0].newUuid;
      pairs[1].newUuid = pairs[0].oldUuid;
    }
    for (Peer* peer : {&creator_, &importer_}) {
      CUcheckpointRestoreArgs args{};
      if (swap_devices) {
        args.gpuPairs = pairs;
        args.gpuPairsCount = 2;
      }
      ASSERT_EQ(restore(peer->pid, &args), CUDA_SUCCESS) << peer->name;
    }
    for (Peer* peer : {&creator_, &importer_}) {
      CUcheckpointUnlockArgs args{};
      ASSERT_EQ(unlock(peer->pid, &args), CUDA_SUCCESS) << peer->name;
      CUprocessState now{};
      ASSERT_EQ(state(peer->pid, &now), CUDA_SUCCESS);
      EXPECT_EQ(now, CU_PROCESS_STATE_RUNNING) << peer->name;
    }
  }

  // The peers as they were set up: their VAs and INSPECT records, the restore oracle.
  void Record() {
    creator_vas_ = creator_.Ask("vas");
    importer_vas_ = importer_.Ask("vas");
    ASSERT_THAT(creator_vas_, StartsWith("ok "));
    creator_records_ = Inspect(creator_);
    importer_records_ = Inspect(importer_);
    ASSERT_EQ(creator_records_.size(), 3u + 4u);   // 3 allocations, 4 mappings
    ASSERT_EQ(importer_records_.size(), 3u + 3u);  // 3 allocations, 3 mappings
  }

  // One checkpoint/restore cycle; `swap_devices` restores device 0 onto 1 and 1 onto 0.
  // `on0` and `on1`: device bytes the job holds on each device once restored.
  void Cycle(uint32_t cycle, bool swap_devices, uint64_t on0, uint64_t on1) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    auto ledger = Native<uint64_t (*)(int)>("simcuda_test_ledger_bytes");
    ASSERT_NE(ledger, nullptr);
    DriveBoth(Op::kQuiesce, Phase::kQuiesced);
    // An application call now waits for the whole window.
    creator_.Send("touch");
    const proto::StepReply saved_creator = Drive(creator_, Op::kSave);
    const proto::StepReply saved_importer = Drive(importer_, Op::kSave);
    EXPECT_EQ(saved_creator.bytes, 8 * kMiB);  // every byte the creator made, HOST_NUMA too
    EXPECT_EQ(saved_importer.bytes, 0u);        // importers carry nothing
    DriveBoth(Op::kDetachMulticast, Phase::kMulticastDetached);
    DriveBoth(Op::kRelease, Phase::kReleased);
    // The GPU memory is gone: nothing left for the native checkpoint to carry.
    EXPECT_EQ(ledger(0), 0u);
    EXPECT_EQ(ledger(1), 0u);

    NativeCycle(swap_devices);

    // No device map reaches the shims: the restore kept each process's ordinals (F7).
    const proto::StepReply reallocated = Drive(creator_, Op::kReallocate);
    EXPECT_EQ(reallocated.state, Phase::kReallocated);
    EXPECT_EQ(reallocated.bytes, 8 * kMiB);
    EXPECT_EQ(Drive(importer_, Op::kReallocate).bytes, 0u);
    DriveBoth(Op::kImport, Phase::kImported);
    DriveBoth(Op::kMulticastCreate, Phase::kMulticastCreated);
    DriveBoth(Op::kMulticastImport, Phase::kMulticastImported);
    DriveBoth(Op::kMulticastJoin, Phase::kMulticastJoined);
    DriveBoth(Op::kMulticastBind, Phase::kRestored);
    // The coordinator compares INSPECT with the state file before ACTIVATE: the records
    // keep the application's device ordinals.
    const std::vector<proto::Record> creator_now = Inspect(creator_);
    const std::vector<proto::Record> importer_now = Inspect(importer_);
    ASSERT_EQ(creator_now.size(), creator_records_.size());
    ASSERT_EQ(importer_now.size(), importer_records_.size());
    EXPECT_EQ(std::memcmp(creator_now.data(), creator_records_.data(),
                          creator_records_.size() * sizeof(proto::Record)), 0);
    EXPECT_EQ(std::memcmp(importer_now.data(), importer_records_.data(),
                          importer_records_.size() * sizeof(proto::Record)), 0);
    EXPECT_FALSE(creator_.ReplyPending()) << "a tracked call ran before ACTIVATE";
    DriveBoth(Op::kActivate, Phase::kActive);
    EXPECT_EQ(creator_.Line(), "ok 0");  // the touch, released by ACTIVATE

    EXPECT_EQ(ledger(0), on0);
    EXPECT_EQ(ledger(1), on1);
    EXPECT_EQ(creator_.Ask("check"), "ok");
    EXPECT_EQ(importer_.Ask("check"), "ok");
    EXPECT_EQ(creator_.Ask("vas"), creator_vas_);
    EXPECT_EQ(importer_.Ask("vas"), importer_vas_);

    // Still shared: a write in one process is read by the other, both ways.
    const std::string original = creator_.Ask("read 1 7");
    ASSERT_THAT(original, StartsWith("ok "));
    const std::string value = std::to_string(0xC0FFEE00u + cycle);
    EXPECT_EQ(importer_.Ask("write 1 7 " + value), "ok");
    EXPECT_EQ(creator_.Ask("read 1 7"), "ok " + value);
    EXPECT_EQ(creator_.Ask("write 1 7 " + original.substr(3)), "ok");
    EXPECT_EQ(importer_.Ask("read 1 7"), original);
    EXPECT_EQ(importer_.Ask("check"), "ok");
  }

  std::string creator_vas_;
  std::string importer_vas_;
  std::vector<proto::Record> creator_records_;
  std::vector<proto::Record> importer_records_;
  std::string carrier_mode_;    // CUSNAP_CARRIER for the peers ("": the default)
  std::string creator_faults_;  // SIMCUDA_FAULTS for the creator (faults.h)
  std::string control_dir_;
  std::string sim_dir_;
  Peer creator_;
  Peer importer_;
};

// Device 0 holds allocation 0 (2 MiB), device 1 allocation 1 (4 MiB); HOST_NUMA is host
// memory. Two cycles in a row: the second reuses the carrier arena.
TEST_F(LifecycleCycleTest, UnicastCycleKeepsBytesVasAndSharingTwice) {
  Record();
  Cycle(1, false, 2 * kMiB, 4 * kMiB);
  Cycle(2, false, 2 * kMiB, 4 * kMiB);
}

// Restored onto swapped GPUs (DRIVER-FACTS F7, measured): each process keeps its ordinals and
// the physical GPU behind them swaps, so the allocations rebuilt on the recorded ordinals are
// accounted on the other physical GPU (ledger per physical GPU: ordinal 0's 2 MiB on GPU 1),
// at the same VAs with the same bytes, records unchanged, still shared both ways; a later
// plain cycle keeps them there.
TEST_F(LifecycleCycleTest, RestoreOntoSwappedGpusKeepsOrdinalsAndMovesTheMemory) {
  Record();
  Cycle(1, true, 4 * kMiB, 2 * kMiB);
  Cycle(2, false, 4 * kMiB, 2 * kMiB);
}

// CUSNAP_CARRIER=eager: the carrier grows in the background as the creator allocates; the
// cycle is the same.
class EagerCarrierCycleTest : public LifecycleCycleTest {
 protected:
  void SetUp() override {
    carrier_mode_ = "eager";
    LifecycleCycleTest::SetUp();
  }
};

TEST_F(EagerCarrierCycleTest, UnicastCycleWithTheCarrierProvidedAhead) {
  Record();
  Cycle(1, false, 2 * kMiB, 4 * kMiB);
}

// A copy that fails during SAVE destroys nothing: the shim stays usable, RESUME brings the
// job back untouched, and the next checkpoint works.
class FailedSaveCycleTest : public LifecycleCycleTest {
 protected:
  void SetUp() override {
    creator_faults_ = "cuMemcpyDtoHAsync:1:700";  // CUDA_ERROR_ILLEGAL_ADDRESS
    LifecycleCycleTest::SetUp();
  }
};

TEST_F(FailedSaveCycleTest, JobResumesAndTheNextCheckpointWorks) {
  Record();
  DriveBoth(Op::kQuiesce, Phase::kQuiesced);
  Result<proto::StepReply> failed = Step(creator_, Op::kSave);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_THAT(failed.error().message, HasSubstr("pid " + std::to_string(creator_.pid)));
  const proto::IdentifyReply identity = Identify(creator_);
  EXPECT_EQ(identity.state, Phase::kQuiesced);
  EXPECT_EQ(identity.failure, "");  // not FAILED
  DriveBoth(Op::kResume, Phase::kActive);
  EXPECT_EQ(creator_.Ask("touch"), "ok 0");
  EXPECT_EQ(creator_.Ask("check"), "ok");
  EXPECT_EQ(importer_.Ask("check"), "ok");
  Cycle(1, false, 2 * kMiB, 4 * kMiB);
}

// A failure inside destructive work keeps the shim's state (RELEASED here) with the reason,
// refuses to resume, keeps application calls waiting, and the step run again goes on: the
// bytes come back from the carrier.
class FailedReallocateCycleTest : public LifecycleCycleTest {
 protected:
  void SetUp() override {
    creator_faults_ = "cuMemCreate:4:2";  // setup makes 3; the 4th is REALLOCATE's
    LifecycleCycleTest::SetUp();
  }
};

TEST_F(FailedReallocateCycleTest, ReallocateRunAgainFinishesTheRestore) {
  Record();
  // Both released: an importer still holding the old allocations would refuse the creator's
  // REALLOCATE before it creates anything (LifecyclePeerSteps).
  DriveBoth(Op::kQuiesce, Phase::kQuiesced);
  DriveBoth(Op::kSave, Phase::kSaved);
  DriveBoth(Op::kDetachMulticast, Phase::kMulticastDetached);
  DriveBoth(Op::kRelease, Phase::kReleased);
  Result<proto::StepReply> failed = Step(creator_, Op::kReallocate);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_THAT(failed.error().message, HasSubstr("the shim stays RELEASED and the step can be run "
                                                "again"));
  const proto::IdentifyReply identity = Identify(creator_);
  EXPECT_EQ(identity.state, Phase::kReleased);
  EXPECT_THAT(identity.failure, HasSubstr("creating allocation"));
  Result<proto::StepReply> refused = Step(creator_, Op::kResume);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, HasSubstr("refused in phase RELEASED"));
  for (Op op : {Op::kReallocate, Op::kImport, Op::kMulticastCreate, Op::kMulticastImport,
                Op::kMulticastJoin, Op::kMulticastBind, Op::kActivate}) {
    for (Peer* peer : {&creator_, &importer_}) {
      Result<proto::StepReply> step = Step(*peer, op);
      ASSERT_TRUE(step.ok()) << peer->name << " " << proto::OpName(op) << ": "
                             << step.error().message;
    }
  }
  EXPECT_EQ(Identify(creator_).state, Phase::kActive);
  EXPECT_EQ(Identify(creator_).failure, "");
  EXPECT_EQ(creator_.Ask("touch"), "ok 0");
  EXPECT_EQ(creator_.Ask("check"), "ok");
  EXPECT_EQ(importer_.Ask("check"), "ok");
}

}  // namespace
}  // namespace cusnap
