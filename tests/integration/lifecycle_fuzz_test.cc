// The lifecycle fuzzer: same-user clients send step requests with random fields (op, lease,
// drain, checkpoint id, dropped multicast ids, device map, hold, carrier path) to the shims
// of a running job (job_worker processes through `cusnap run`, simulated driver), from
// several threads at once, for a fixed list of seeds and a bounded number of requests.
// No shim may wedge (every request is answered within a bound, `cusnap status` answers after
// each seed) or spin (over an idle window after the fuzzing each worker's CPU time stays
// under half the window); `cusnap recover` then brings the job back to running with every
// byte, and a full checkpoint and restore works. A failure prints every step that succeeded,
// in the order the shims answered, with its seed and client: the sequence to reproduce.
#include <gmock/gmock.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/durations.h"
#include "common/endpoint_client.h"
#include "common/messages.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using cusnap::proto::Op;

/// The seeds, each a round of kRequestsPerClient requests from each of kClients threads.
constexpr uint32_t kSeeds[] = {1, 7, 35, 1009};
constexpr int kClients = 3;
constexpr int kRequestsPerClient = 60;
/// Bound on one request's answer (ms): a shim that does not answer by then is wedged.
constexpr int kAnswerMs = 60'000;

/// The lifecycle ops a step request may carry.
constexpr Op kStepOps[] = {Op::kQuiesce,        Op::kDetachMulticast, Op::kSave,
                           Op::kRelease,        Op::kReallocate,      Op::kImport,
                           Op::kMulticastCreate, Op::kMulticastImport, Op::kMulticastJoin,
                           Op::kMulticastBind,  Op::kResume,          Op::kActivate,
                           Op::kRenew,          Op::kCommit,          Op::kWriteCarrier,
                           Op::kReadCarrier};

/// CPU time (user + system) of `pid` in clock ticks, from /proc/<pid>/stat.
uint64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  // Fields after the command: state is field 3; utime and stime are fields 14 and 15.
  for (int k = 3; k <= 15 && fields >> field; ++k) {
    if (k == 14) utime = std::stoull(field);
    if (k == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

/// One client's random step requests.
class RandomSteps {
 public:
  explicit RandomSteps(uint32_t seed) : rng_(seed) {}

  cusnap::proto::StepRequest Next() {
    cusnap::proto::StepRequest r{kStepOps[Pick(std::size(kStepOps))], Duration(), Text()};
    r.lease_ms = Duration();
    for (size_t k = Pick(3); k > 0; --k) {
      r.dropped_multicast.push_back(cusnap::proto::ObjectId{
          static_cast<int32_t>(rng_()), 0, rng_(), Pick(2) ? rng_() : Pick(4)});
    }
    r.device_map = Pick(2) ? "" : "GPU-" + Text() + "=GPU-" + Text();
    // held stays false: a held process stops itself by design once its lease runs out
    // (shim/lifecycle/lifecycle.h), and a stopped process answers nobody until continued.
    r.carrier_path = Path();
    return r;
  }

  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

 private:
  /// Mostly short, sometimes at or past the bounds of the ranges, sometimes anything.
  uint64_t Duration() {
    switch (Pick(10)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return cusnap::kMaxLeaseMs;
      case 3: return cusnap::kMaxLeaseMs + 1;
      case 4: return 10'000'000'000'000;
      case 5: return UINT64_MAX;
      case 6: return (uint64_t{rng_()} << 32) | rng_();
      default: return 20 + Pick(2000);
    }
  }
  std::string Text() {
    std::string text(Pick(24), ' ');
    for (char& c : text) c = static_cast<char>(1 + Pick(255));
    return text;
  }
  /// Paths a carrier can neither be written to nor read from (a relative path and a bare
  /// folder are refused by the endpoint, CarrierPathProblem): the job's bytes stay in memory,
  /// where `recover` finds them.
  std::string Path() {
    switch (Pick(5)) {
      case 0: return "";
      case 1: return "relative/carrier";
      case 2: return "/nonexistent-cusnap-fuzz/carrier";
      case 3: return "/proc/self/carrier-" + Text();
      default: return std::string(Pick(5000), '/');
    }
  }
  std::mt19937 rng_;
};

/// The steps that succeeded, in the order the shims answered: printed when the test failed
/// (on any return), the sequence to reproduce.
struct StepsDone {
  pid_t creator;
  pid_t importer;
  std::vector<std::string> steps{};
  ~StepsDone() {
    if (!::testing::Test::HasFailure()) return;
    std::string text;
    for (const std::string& line : steps) text += line + "\n";
    ADD_FAILURE() << "creator pid " << creator << ", importer pid " << importer
                  << "; the steps that succeeded:\n" << text;
  }
};

using LifecycleFuzz = JobTest;

TEST_F(LifecycleFuzz, RandomStepRequestsNeitherWedgeNorSpinAShimAndTheJobComesBack) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(ShareBothWays(creator, importer));
  const Snapshot before = Snap();
  const std::vector<pid_t> shims = {creator.pid, importer.pid};
  const std::string control = cusnap::ControlDir();
  const std::string state = dir_ + "/state";
  std::mutex done_mutex;
  StepsDone done{creator.pid, importer.pid};

  for (const uint32_t seed : kSeeds) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::vector<std::string> wedged(kClients);
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        RandomSteps steps(seed * 131 + static_cast<uint32_t>(c));
        for (int k = 0; k < kRequestsPerClient && wedged[c].empty(); ++k) {
          const pid_t to = shims[steps.Pick(shims.size())];
          const cusnap::proto::StepRequest request = steps.Next();
          auto reply = cusnap::Request<cusnap::proto::StepReply>(
              cusnap::EndpointPath(control, to), request.Encode(), kAnswerMs, request.op);
          if (reply.ok()) {
            std::lock_guard lock(done_mutex);
            done.steps.push_back("seed " + std::to_string(seed) + " client " +
                                 std::to_string(c) + ": pid " + std::to_string(to) + " " +
                                 cusnap::proto::OpName(request.op) + " (lease " +
                                 std::to_string(request.lease_ms) + " ms) -> " +
                                 cusnap::proto::ShimStateName(reply->state));
          }
          // A refusal is an answer; no answer at all within the bound is a wedge.
          if (!reply.ok() && reply.error().code == ETIMEDOUT) {
            wedged[c] = "pid " + std::to_string(to) + " did not answer " +
                        cusnap::proto::OpName(request.op) + " within " +
                        std::to_string(kAnswerMs) + " ms";
          }
        }
      });
    }
    for (auto& t : clients) t.join();
    for (const std::string& w : wedged) EXPECT_EQ(w, "");
    const Ran st = Cusnap({"status", "--all"});
    EXPECT_EQ(st.status, 0) << st.out << st.err;
    ASSERT_FALSE(HasFatalFailure());
  }

  // Whatever state the requests left: recover brings every shim back to running.
  const Ran rc = Cusnap({"recover", "--all", "--state-dir", state});
  EXPECT_EQ(rc.status, 0) << rc.out << rc.err;
  ASSERT_EQ(Phases(), std::vector<std::string>(2, "active")) << rc.out << rc.err;

  // Idle now: no shim thread may burn the CPU (a wait on a wrapped duration spins).
  constexpr int kWindowMs = 2'000;
  std::vector<uint64_t> ticks;
  for (pid_t pid : shims) ticks.push_back(CpuTicks(pid));
  std::this_thread::sleep_for(std::chrono::milliseconds(kWindowMs));
  const double ticks_per_ms = static_cast<double>(::sysconf(_SC_CLK_TCK)) / 1000.0;
  for (size_t i = 0; i < shims.size(); ++i) {
    const uint64_t used = CpuTicks(shims[i]) - ticks[i];
    EXPECT_LT(static_cast<double>(used), 0.5 * kWindowMs * ticks_per_ms)
        << "pid " << shims[i] << " used " << used << " ticks over an idle " << kWindowMs << " ms";
  }

  // Same VAs and sizes (allocations are fresh ones only where the requests released them).
  CheckEveryByte();
  const Snapshot after = Snap();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].va, before[i].va);
    EXPECT_EQ(after[i].size, before[i].size);
  }
  CrossWrite(creator, "a", importer, "ai");
  CrossWrite(importer, "b", creator, "bi");
  Cycle(dir_ + "/state-after");
}

}  // namespace
}  // namespace jobtest
