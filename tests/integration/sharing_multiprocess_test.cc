// Multi-process tests of the shim's sharing core on the simulated driver: real processes
// (actor_share) with the shim preloaded, each test with its own control directory. The
// actors check bytes, handles and descriptor tables themselves and exit non-zero on any
// mismatch; the test asserts exit codes and, where a test talks to an actor's endpoint, the
// values its kIdentify / kInspect replies carry.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <cuda.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/socket.h"
#include "printers.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

class SharingProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    shim_ = Env("CUSNAP_TEST_SHIM");
    simcuda_ = Env("CUSNAP_TEST_SIMCUDA_DIR");
    actor_ = Env("CUSNAP_TEST_BIN_DIR") + "/actor_share";
    if (shim_.empty() || simcuda_.empty()) GTEST_SKIP() << "run through ctest (test environment)";
    char templ[] = "/tmp/cusnap-sharing-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    control_dir_ = templ;
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (!control_dir_.empty()) std::filesystem::remove_all(control_dir_);
  }

  // Starts actor_share `args` with `channel` as its descriptor 3.
  pid_t Spawn(const std::vector<std::string>& args, int channel,
              const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env = {"LD_PRELOAD=" + shim_, "LD_LIBRARY_PATH=" + simcuda_,
                                    "CUSNAP_CONTROL_DIR=" + control_dir_};
    for (const char* keep : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "CUSNAP_LOG", "PATH"}) {
      if (const char* v = std::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<std::string> argv_text = {actor_};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(channel, 3);
      fcntl(3, F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
      execve(actor_.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }

  // Exit code of `pid` if it ends within `ms`; -1 (and the process killed) otherwise.
  int WaitExit(pid_t pid, int ms) {
    const Deadline deadline = Deadline::AfterMs(ms);
    for (;;) {
      int status = 0;
      const pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        std::erase(children_, pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (deadline.Passed()) return -1;  // TearDown kills it
      poll(nullptr, 0, 10);
    }
  }

  // A socketpair for two actors (or the test and one actor).
  static std::pair<int, int> Channel() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    return {fds[0], fds[1]};
  }

  void RunPair(const char* transport) {
    auto [a, b] = Channel();
    const pid_t creator = Spawn({"creator", transport}, a);
    const pid_t importer = Spawn({"importer", transport}, b);
    close(a);
    close(b);
    EXPECT_EQ(WaitExit(importer, 60'000), 0);
    EXPECT_EQ(WaitExit(creator, 60'000), 0);
  }

  std::string shim_, simcuda_, actor_, control_dir_;
  std::vector<pid_t> children_;
};

TEST_F(SharingProcesses, TicketTravelsBySCMRights) { RunPair("scm"); }

TEST_F(SharingProcesses, TicketTravelsByPidfdGetfd) { RunPair("pidfd"); }

TEST_F(SharingProcesses, TicketTravelsByForkInheritance) {
  auto [a, b] = Channel();
  const pid_t creator = Spawn({"creator", "spawn"}, a);
  close(a);
  close(b);
  EXPECT_EQ(WaitExit(creator, 60'000), 0);
}

TEST_F(SharingProcesses, MutualImportsFinishWhileApplicationThreadsSitInLongCalls) {
  auto [a, b] = Channel();
  // cuCtxSynchronize takes 10 minutes: the imports must not wait for it.
  const std::vector<std::string> env = {"SIMCUDA_DELAYS=cuCtxSynchronize:600000"};
  const pid_t first = Spawn({"mutual"}, a, env);
  const pid_t second = Spawn({"mutual"}, b, env);
  close(a);
  close(b);
  EXPECT_EQ(WaitExit(first, 60'000), 0);
  EXPECT_EQ(WaitExit(second, 60'000), 0);
}

TEST_F(SharingProcesses, UntrackedImportIsCountedAndArgumentsAreChecked) {
  auto [test_end, actor_end] = Channel();
  const pid_t actor = Spawn({"basics"}, actor_end);
  close(actor_end);
  char buf[64];
  int fd = -1;
  auto got = RecvPacket(test_end, buf, sizeof buf, &fd, Deadline::AfterMs(60'000));
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(std::string(buf, *got), "untracked-imported");

  const std::string path = EndpointPath(control_dir_, actor);
  auto identify = Request<proto::IdentifyReply>(path, proto::IdentifyRequest{}.Encode(), 30'000);
  ASSERT_TRUE(identify.ok()) << identify.error().message;
  EXPECT_EQ(identify->pid, actor);
  EXPECT_EQ(identify->start_time, ProcessStartTime(actor));
  EXPECT_EQ(identify->untracked_imports, 1u);
  EXPECT_EQ(identify->state, proto::ShimState::kActive);

  // 200 tracked allocations (one mapped): more records than one packet holds.
  auto inspect = Request<proto::InspectReply>(path, proto::InspectRequest{}.Encode(), 30'000);
  ASSERT_TRUE(inspect.ok()) << inspect.error().message;
  ASSERT_GT(inspect->records.size(), proto::kMaxRecordsPerMessage);
  EXPECT_EQ(inspect->records.size(), identify->records);
  size_t allocations = 0, mappings = 0;
  for (const proto::Record& r : inspect->records) {
    if (r.kind == static_cast<uint32_t>(proto::RecordKind::kAllocation)) {
      ++allocations;
      EXPECT_EQ(r.id.creator_pid, actor);
      EXPECT_EQ(r.flags & proto::kCreator, proto::kCreator);
      EXPECT_EQ(r.handle_types, static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    } else if (r.kind == static_cast<uint32_t>(proto::RecordKind::kMapping)) {
      ++mappings;
      EXPECT_EQ(r.access_count, 1u);
      EXPECT_EQ(r.access[0].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
    }
  }
  EXPECT_EQ(allocations, 200u);
  EXPECT_EQ(mappings, 1u);
  EXPECT_EQ(identify->tracked_bytes, allocations * inspect->records[0].object_size);

  // A client of another protocol version gets an answer in the shim's version that names
  // both (version 1's header: magic, version and op where versions 2 and 3 have them).
  auto old_client = ConnectSeqpacket(path, Deadline::AfterMs(10'000));
  ASSERT_TRUE(old_client.ok()) << old_client.error().message;
  char v1[256] = {};
  const proto::FrameHeader v1_header{proto::kMagic, 1,
                                     static_cast<uint16_t>(proto::Op::kIdentify), 0, 0};
  std::memcpy(v1, &v1_header, sizeof v1_header);
  ASSERT_TRUE(SendPacket(old_client->get(), v1, sizeof v1, -1, Deadline::AfterMs(10'000)).ok());
  auto answer = ReceiveMessage(old_client->get(), Deadline::AfterMs(30'000));
  ASSERT_TRUE(answer.ok()) << answer.error().message;
  auto refused = proto::IdentifyReply::Decode(*answer);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, EPROTONOSUPPORT);
  EXPECT_THAT(refused.error().message,
              HasSubstr("the peer speaks cusnap protocol version 1, this side version " +
                        std::to_string(proto::kVersion)));

  ASSERT_TRUE(SendPacket(test_end, "release", 7, -1, Deadline::AfterMs(10'000)).ok());
  got = RecvPacket(test_end, buf, sizeof buf, &fd, Deadline::AfterMs(60'000));
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(std::string(buf, *got), "released");
  identify = Request<proto::IdentifyReply>(path, proto::IdentifyRequest{}.Encode(), 30'000);
  ASSERT_TRUE(identify.ok());
  EXPECT_EQ(identify->untracked_imports, 0u);
  ASSERT_TRUE(SendPacket(test_end, "exit", 4, -1, Deadline::AfterMs(10'000)).ok());
  EXPECT_EQ(WaitExit(actor, 60'000), 0);
  close(test_end);
}

TEST_F(SharingProcesses, ChildForkedBeforeCudaGetsItsOwnEndpointAtItsFirstTrackedCall) {
  auto [a, b] = Channel();
  const pid_t actor = Spawn({"fork-early"}, a);
  close(a);
  close(b);
  EXPECT_EQ(WaitExit(actor, 60'000), 0);
}

TEST_F(SharingProcesses, ChildForkedAfterTrackingNeverFreesTheParentsMemory) {
  auto [a, b] = Channel();
  const pid_t actor = Spawn({"fork-late"}, a);
  close(a);
  close(b);
  EXPECT_EQ(WaitExit(actor, 60'000), 0);
}

TEST_F(SharingProcesses, ChildForkedWhileQuiescedStartsActiveWithAnOpenGate) {
  auto [a, b] = Channel();
  const pid_t actor = Spawn({"fork-quiesced"}, a);
  close(a);
  close(b);
  EXPECT_EQ(WaitExit(actor, 30'000), 0);
}

}  // namespace
}  // namespace cusnap
