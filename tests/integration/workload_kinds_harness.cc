// The workload-kind tests' harness (workload_kinds_harness.h).
#include "workload_kinds_harness.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

extern char** environ;

namespace workload {
namespace {

namespace fs = std::filesystem;
using ::testing::StartsWith;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

long NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

/// posix_spawn of `args` with the given descriptors as 0, 1, 2, 3 and 4 (-1: inherited /
/// none). `next` and `previous` must be above 4, so that no dup2 overwrites a later source.
pid_t Spawn(const std::vector<std::string>& args, int in, int out, int err, int next = -1,
            int previous = -1) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in >= 0) posix_spawn_file_actions_adddup2(&actions, in, 0);
  if (out >= 0) posix_spawn_file_actions_adddup2(&actions, out, 1);
  if (err >= 0) posix_spawn_file_actions_adddup2(&actions, err, 2);
  if (next >= 0) posix_spawn_file_actions_adddup2(&actions, next, 3);
  if (previous >= 0) posix_spawn_file_actions_adddup2(&actions, previous, 4);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

/// Waits for `pid` until `deadline_ms` (NowMs clock), then SIGKILLs it; returns the wait status.
int Reap(pid_t pid, long deadline_ms) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (NowMs() > deadline_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(10'000);  // polling a child's exit: no descriptor to wait on
  }
  return status;
}

}  // namespace

nlohmann::json Ran::Report() const {
  return nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
}

double Ran::PhaseMs() const {
  const nlohmann::json report = Report();
  double total = 0;
  if (report.is_object()) {
    for (const auto& p : report["phases"]) total += p["elapsed_ms"].get<double>();
  }
  return total;
}

void WorkloadKindsTest::SetUp() {
  char templ[] = "/tmp/cusnap-workload-kinds.XXXXXX";
  ASSERT_NE(mkdtemp(templ), nullptr);
  dir_ = templ;
  ::mkdir((dir_ + "/control").c_str(), 0700);  // a control directory must be private
  fs::create_directory(dir_ + "/sim");
  // Everything this test starts shares one simulated machine and one control directory.
  setenv("CUSNAP_CONTROL_DIR", (dir_ + "/control").c_str(), 1);
  setenv("SIMCUDA_DIR", (dir_ + "/sim").c_str(), 1);
  setenv("CUSNAP_DRIVER", "sim", 1);
  setenv("SIMCUDA_DEVICE_COUNT", std::to_string(Ranks()).c_str(), 1);
  unsetenv("LD_PRELOAD");
}

Rank& WorkloadKindsTest::R(int r) {
  const int n = static_cast<int>(ranks_.size());
  return ranks_[static_cast<size_t>(((r % n) + n) % n)];
}

std::string WorkloadKindsTest::RotatedDeviceMap() const {
  std::string map;
  // Appended piecewise: GCC 12 at -O3 takes `"," + std::to_string(k)` for an overlapping
  // copy (a -Werror=restrict false positive that broke the release preset).
  for (int k = 0; k < Ranks(); ++k) {
    map.append(k ? "," : "").append(std::to_string(k)).append("=").append(std::to_string((k + 1) % Ranks()));
  }
  return map;
}

void WorkloadKindsTest::TearDown() {
  for (Rank& r : ranks_) {
    if (r.pid > 0) {
      kill(r.pid, SIGKILL);
      waitpid(r.pid, nullptr, 0);
      r.pid = -1;
    }
    if (r.in >= 0) close(r.in);
    if (r.out >= 0) close(r.out);
    r.in = r.out = -1;
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

void WorkloadKindsTest::StartRanks(bool even_without_context) {
  ASSERT_TRUE(ranks_.empty()) << "StartRanks once per test";
  const int n = Ranks();
  ASSERT_GE(n, 2);
  // Ring channel k joins rank k (its "next", descriptor 3) to rank k+1 (its "previous",
  // descriptor 4). Every descriptor of ours sits above 4 (Spawn) and is CLOEXEC, so each
  // rank gets exactly its two channel ends.
  std::vector<int> next_end(static_cast<size_t>(n)), previous_end(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
    next_end[static_cast<size_t>(k)] = fcntl(pair[0], F_DUPFD_CLOEXEC, 10);
    previous_end[static_cast<size_t>((k + 1) % n)] = fcntl(pair[1], F_DUPFD_CLOEXEC, 10);
    close(pair[0]);
    close(pair[1]);
  }
  const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
  ranks_.resize(static_cast<size_t>(n));
  for (int device = 0; device < n; ++device) {
    Rank& r = R(device);
    int to_child[2], from_child[2];
    ASSERT_EQ(pipe2(to_child, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(from_child, O_CLOEXEC), 0);
    r.name = "rank " + std::to_string(device);
    std::vector<std::string> args = {bin + "/cusnap", "run", "--", bin + "/workload_kinds_worker",
                                     std::to_string(device)};
    if (device % 2 == 0 && even_without_context) args.push_back("nocontext");
    const size_t d = static_cast<size_t>(device);
    r.pid = Spawn(args, to_child[0], from_child[1], -1, next_end[d], previous_end[d]);
    close(to_child[0]);
    close(from_child[1]);
    r.in = to_child[1];
    r.out = from_child[0];
    ASSERT_GT(r.pid, 0) << "spawning " << r.name;
  }
  for (int k = 0; k < n; ++k) {
    close(next_end[static_cast<size_t>(k)]);
    close(previous_end[static_cast<size_t>(k)]);
  }
  for (Rank& r : ranks_) {
    const std::string hello = Ask(r, "");
    ASSERT_THAT(hello, StartsWith("ready")) << r.name << " said '" << hello << "'";
  }
}

void WorkloadKindsTest::StopRanks() {
  const std::string bye = "exit\n";
  for (Rank& r : ranks_) {  // all at once: ranks exit concurrently
    if (r.pid > 0) {
      EXPECT_EQ(write(r.in, bye.data(), bye.size()), static_cast<ssize_t>(bye.size())) << r.name;
    }
  }
  const long deadline = NowMs() + kWaitMs;
  for (Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    const int status = Reap(r.pid, deadline);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << r.name << " wait status " << status;
    r.pid = -1;
    close(r.in);
    close(r.out);
    r.in = r.out = -1;
    r.pending.clear();
  }
}

std::string WorkloadKindsTest::Ask(Rank& r, const std::string& command) {
  // An empty command only reads (the "ready" line).
  if (!command.empty()) {
    const std::string line = command + "\n";
    if (write(r.in, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return "<eof>";
  }
  const long deadline = NowMs() + kWaitMs;
  for (;;) {
    const size_t newline = r.pending.find('\n');
    if (newline != std::string::npos) {
      std::string reply = r.pending.substr(0, newline);
      r.pending.erase(0, newline + 1);
      return reply;
    }
    const long left = deadline - NowMs();
    if (left <= 0) return "<timeout>";
    pollfd p{r.out, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = read(r.out, buf, sizeof buf);
    if (n <= 0) return "<eof>";
    r.pending.append(buf, static_cast<size_t>(n));
  }
}

std::string WorkloadKindsTest::Ok(Rank& r, const std::string& command) {
  const std::string reply = Ask(r, command);
  EXPECT_THAT(reply, StartsWith("ok")) << r.name << ": '" << command << "' -> '" << reply << "'";
  return reply.size() > 3 ? reply.substr(3) : "";
}

std::vector<std::string> WorkloadKindsTest::OkAll(const std::function<std::string(int)>& command) {
  std::vector<std::string> commands, replies;
  for (int r = 0; r < Ranks(); ++r) {
    commands.push_back(command(r));
    const std::string line = commands.back() + "\n";
    EXPECT_EQ(write(R(r).in, line.data(), line.size()), static_cast<ssize_t>(line.size())) << R(r).name;
  }
  for (int r = 0; r < Ranks(); ++r) {
    std::string reply = Ask(R(r), "");  // reads the reply to the command already sent
    EXPECT_THAT(reply, StartsWith("ok")) << R(r).name << ": '" << commands[static_cast<size_t>(r)] << "' -> '"
                                         << reply << "'";
    replies.push_back(reply.size() > 3 ? reply.substr(3) : "");
  }
  return replies;
}

std::vector<std::string> WorkloadKindsTest::OkAll(const std::string& command) {
  return OkAll([&](int) { return command; });
}

Ran WorkloadKindsTest::Cusnap(const std::vector<std::string>& args) {
  int out[2], err[2];
  Ran ran;
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return ran;
  std::vector<std::string> argv = {Env("CUSNAP_TEST_BIN_DIR") + "/cusnap"};
  argv.insert(argv.end(), args.begin(), args.end());
  const int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = Spawn(argv, null_in, out[1], err[1]);
  close(null_in);
  close(out[1]);
  close(err[1]);
  const long deadline = NowMs() + kWaitMs;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&ran.out, &ran.err};
  int open_count = 2;
  while (pid > 0 && open_count > 0 && NowMs() < deadline) {
    if (poll(fds, 2, 1000) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        fds[i].fd = -1;
        --open_count;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  if (pid <= 0) return ran;
  const int status = Reap(pid, deadline);
  ran.status = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

void WorkloadKindsTest::CrossWrite(Rank& a, const std::string& name_a, Rank& b,
                                   const std::string& name_b, uint32_t salt) {
  Ok(a, "poke " + name_a + " " + std::to_string(1000 + salt));
  EXPECT_EQ(Ok(b, "peek " + name_b), std::to_string(1000 + salt)) << name_a << ": a's write, read by b";
  Ok(b, "poke " + name_b + " " + std::to_string(2000 + salt));
  EXPECT_EQ(Ok(a, "peek " + name_a), std::to_string(2000 + salt)) << name_a << ": b's write, read by a";
}

std::pair<Ran, Ran> WorkloadKindsTest::Cycle(const std::vector<std::string>& restore_extra) {
  const std::string pid = std::to_string(getpid());
  const std::string state = dir_ + "/state";
  Ran ck = Cusnap({"checkpoint", "--pid", pid, "--state-dir", state, "--json"});
  EXPECT_EQ(ck.status, 0) << "checkpoint:\n" << ck.out << ck.err;
  std::vector<std::string> restore = {"restore", "--pid", pid, "--state-dir", state, "--json"};
  restore.insert(restore.end(), restore_extra.begin(), restore_extra.end());
  Ran rs = Cusnap(restore);
  EXPECT_EQ(rs.status, 0) << "restore:\n" << rs.out << rs.err;
  return {ck, rs};
}

}  // namespace workload
