// The CLI integration tests' harness (job_harness.h).
#include "job_harness.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "common/socket.h"

namespace jobtest {
namespace {

namespace fs = std::filesystem;
using cusnap::testing::ChildFd;
using cusnap::testing::Env;
using cusnap::testing::Spawn;
using ::testing::HasSubstr;
using ::testing::StartsWith;

/// Milliseconds left until `deadline` (at least 0).
int LeftMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

/// Waits for `pid` to exit for at most `ms`, then SIGKILLs it; reaps it either way unless it
/// is not our child (`child` false: its parent reaps it). Returns the wait status (0 for
/// another's child).
int Reap(pid_t pid, int ms, bool child = true) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int rc;
    while ((rc = ::poll(&p, 1, ms)) < 0 && errno == EINTR) {
    }
    if (rc == 0) {
      ADD_FAILURE() << "pid " << pid << " did not exit within " << ms << " ms; killed";
      ::kill(pid, SIGKILL);
    }
    ::close(pidfd);
  }
  if (!child) return 0;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::string OkValue(const std::string& reply) {
  return reply.rfind("ok ", 0) == 0 ? reply.substr(3) : "";
}

void JobTest::SetUp() {
  // A worker that died must fail the test, not kill it with SIGPIPE (the test process only).
  ::signal(SIGPIPE, SIG_IGN);
  ScratchDirTest::SetUp();
  if (HasFatalFailure()) return;
  // Everything this test starts shares one simulated machine and one control directory.
  cusnap::testing::UseOwnMachine(dir_);
  ::unsetenv("SIMCUDA_FAULTS");
  ::unsetenv("CUSNAP_STATE_DIR");
  // Checkpointed workers stay runnable: the harness asks them about their memory while
  // checkpointed (ExpectSuspended), which a stopped process cannot answer. The default hold
  // (stopped) has its own tests: cli_job_hold.cc.
  ::setenv("CUSNAP_HOLD", "run", 1);
  target_ = {"--pid", PidArg()};
}

void JobTest::TearDown() {
  // A launcher's workers first: the launcher waits for them before it exits.
  for (const bool children : {false, true}) {
    for (auto& w : workers_) {
      if (w.pid <= 0 || w.child != children) continue;
      const std::string name = w.name + " (pid " + std::to_string(w.pid) + ")";
      const int status = Stop(w);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << name << " ended with wait status " << status;
    }
  }
  ScratchDirTest::TearDown();
}

Worker& JobTest::Start(const std::string& name, int device, bool bare,
                       const std::string& visible, const std::vector<int>& physical) {
  const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
  std::vector<std::string> args;
  if (!visible.empty()) args = {"/usr/bin/env", "CUDA_VISIBLE_DEVICES=" + visible};
  if (!bare) args.insert(args.end(), {bin + "/cusnap", "run", "--"});
  args.push_back(bin + "/job_worker");
  args.push_back(std::to_string(device));
  Worker& started = StartProgram(name, args);
  started.shim = !bare;
  started.physical = physical;
  const std::string ready = Ask(started, "");
  EXPECT_EQ(ready, "ready") << name;
  return started;
}

Worker& JobTest::StartProgram(const std::string& name, const std::vector<std::string>& args) {
  int to_child[2], from_child[2], channel[2];
  EXPECT_EQ(::pipe2(to_child, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(from_child, O_CLOEXEC), 0);
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel), 0);
  Worker w;
  w.name = name;
  w.pid = Spawn(args, {{to_child[0], 0}, {from_child[1], 1}, {channel[1], 3}});
  EXPECT_GT(w.pid, 0) << "cannot start " << name;
  ::close(to_child[0]);
  ::close(from_child[1]);
  ::close(channel[1]);
  w.in = to_child[1];
  w.out = from_child[0];
  w.channel = channel[0];
  workers_.push_back(w);
  return workers_.back();
}

std::vector<Worker*> JobTest::StartLaunched(const std::string& name,
                                            const std::vector<int>& devices) {
  // Every worker's descriptors land on 10+3k.. in the launcher (Spawn keeps the sources out of
  // the targets' way).
  int launcher_in[2], launcher_out[2];
  EXPECT_EQ(::pipe2(launcher_in, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(launcher_out, O_CLOEXEC), 0);
  std::vector<ChildFd> fds = {{launcher_in[0], 0}, {launcher_out[1], 1}};
  std::vector<Worker> launched(devices.size());
  std::vector<int> theirs;
  for (size_t k = 0; k < devices.size(); ++k) {
    int to[2], from[2], channel[2];
    EXPECT_EQ(::pipe2(to, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(from, O_CLOEXEC), 0);
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel), 0);
    const int base = 10 + 3 * static_cast<int>(k);
    theirs.insert(theirs.end(), {to[0], from[1], channel[1]});
    fds.insert(fds.end(), {{to[0], base}, {from[1], base + 1}, {channel[1], base + 2}});
    launched[k].name = name + std::to_string(k);
    launched[k].in = to[1];
    launched[k].out = from[0];
    launched[k].channel = channel[0];
    launched[k].child = false;
  }
  const std::string bin = Env("CUSNAP_TEST_BIN_DIR");
  std::vector<std::string> args = {bin + "/cusnap", "run", "--", bin + "/job_worker", "launch"};
  for (int d : devices) args.push_back(std::to_string(d));
  Worker launcher;
  launcher.name = name;
  launcher.cuda = false;
  launcher.pid = Spawn(args, fds);
  EXPECT_GT(launcher.pid, 0);
  ::close(launcher_in[0]);
  ::close(launcher_out[1]);
  for (int fd : theirs) ::close(fd);
  launcher.in = launcher_in[1];
  launcher.out = launcher_out[0];
  workers_.push_back(launcher);
  std::vector<Worker*> started = {&workers_.back()};
  EXPECT_EQ(Ask(workers_.back(), ""), "ready") << name;
  for (Worker& w : launched) {
    w.pid = 1;  // not known yet; Ask only needs it positive
    workers_.push_back(w);
    Worker& added = workers_.back();
    EXPECT_EQ(Ask(added, ""), "ready") << added.name;
    const std::string pid = OkValue(Ask(added, "pid"));
    added.pid = pid.empty() ? -1 : std::stoi(pid);
    started.push_back(&added);
  }
  return started;
}

std::string JobTest::Ask(Worker& w, const std::string& command, int wait_ms) {
  if (w.pid <= 0) return "<not running>";
  if (!command.empty()) {  // empty: only read (the "ready" line)
    const std::string line = command + "\n";
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(w.in, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return "<eof>";
      done += static_cast<size_t>(n);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const size_t newline = w.pending.find('\n');
    if (newline != std::string::npos) {
      std::string reply = w.pending.substr(0, newline);
      w.pending.erase(0, newline + 1);
      if (std::getenv("CUSNAP_JOB_TRACE") != nullptr) {  // to follow a scenario by hand
        std::fprintf(stderr, "[%s] %s -> %s\n", w.name.c_str(), command.c_str(), reply.c_str());
      }
      return reply;
    }
    pollfd p{w.out, POLLIN, 0};
    const int rc = ::poll(&p, 1, LeftMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      ADD_FAILURE() << w.name << " (pid " << w.pid << ") did not answer '" << command << "'";
      return "<timeout>";
    }
    char buf[4096];
    const ssize_t n = ::read(w.out, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "<eof>";
    w.pending.append(buf, static_cast<size_t>(n));
  }
}

int JobTest::Stop(Worker& w) {
  if (w.pid <= 0) return 0;
  const std::string bye = "exit\n";
  (void)!::write(w.in, bye.data(), bye.size());
  CloseFd(w.in);
  const int status = Reap(w.pid, kWaitMs, w.child);
  w.pid = -1;
  CloseFd(w.out);
  CloseFd(w.channel);
  return status;
}

void JobTest::Kill(Worker& w) {
  if (w.pid <= 0) return;
  ::kill(w.pid, SIGKILL);
  Reap(w.pid, kWaitMs, w.child);
  w.pid = -1;
  CloseFd(w.in);
  CloseFd(w.out);
  CloseFd(w.channel);
}

void JobTest::Create(Worker& w, const std::string& allocation, size_t mib, const char* where,
                     int id, bool exportable) {
  const std::string reply = Ask(w, "create " + allocation + " " + std::to_string(mib) + " " +
                                       where + " " + std::to_string(id) +
                                       (exportable ? "" : " private"));
  ASSERT_THAT(reply, StartsWith("ok ")) << w.name << " create " << allocation;
  seeds_[allocation] = 0x5eed0000u + static_cast<uint32_t>(seeds_.size()) * 7919u;
  const auto ordinal = static_cast<size_t>(id);
  const int gpu = ordinal < w.physical.size() ? w.physical[ordinal] : id;  // physical GPU
  if (std::string(where) == "dev") device_allocations_[allocation] = {mib, gpu};
}

void JobTest::Share(Worker& from, const std::string& allocation, Worker& to) {
  ASSERT_EQ(Ask(from, "export " + allocation), "ok") << from.name << " export " << allocation;
  char buf[256];
  int fd = -1;
  const auto got = cusnap::RecvPacket(from.channel, buf, sizeof buf, &fd,
                                      cusnap::Deadline::AfterMs(kWaitMs));
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_GE(fd, 0) << from.name << " sent no descriptor for " << allocation;
  const auto sent = cusnap::SendPacket(to.channel, allocation.data(), allocation.size(), fd,
                                       cusnap::Deadline::AfterMs(kWaitMs));
  ::close(fd);
  ASSERT_TRUE(sent.ok()) << sent.error().message;
  ASSERT_THAT(Ask(to, "import " + allocation), StartsWith("ok ")) << to.name << " import "
                                                                  << allocation;
}

void JobTest::Map(Worker& w, const std::string& view, const std::string& allocation,
                  size_t offset_mib, size_t mib, const std::string& devices) {
  const std::string reply = Ask(w, "map " + view + " " + allocation + " " +
                                       std::to_string(offset_mib) + " " + std::to_string(mib) +
                                       " " + devices);
  ASSERT_THAT(reply, StartsWith("ok 0x")) << w.name << " map " << view;
  views_.push_back(ViewRecord{&w, view, allocation, offset_mib, mib});
}

void JobTest::CreateFilled(Worker& w, const std::string& allocation, size_t mib,
                           const char* where, int id, const std::string& view,
                           const std::string& devices) {
  ASSERT_NO_FATAL_FAILURE(Create(w, allocation, mib, where, id));
  ASSERT_NO_FATAL_FAILURE(Map(w, view, allocation, 0, mib, devices));
  ASSERT_NO_FATAL_FAILURE(Fill(w, view));
}

void JobTest::ShareMapped(Worker& from, const std::string& allocation, Worker& to,
                          const std::string& view, size_t mib, const std::string& devices) {
  ASSERT_NO_FATAL_FAILURE(Share(from, allocation, to));
  ASSERT_NO_FATAL_FAILURE(Map(to, view, allocation, 0, mib, devices));
}

void JobTest::ShareBothWays(Worker& creator, Worker& importer) {
  ASSERT_NO_FATAL_FAILURE(CreateFilled(creator, "A", 2, "dev", 0, "a", "0"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(creator, "A", importer, "ai", 2, "1"));
  ASSERT_NO_FATAL_FAILURE(CreateFilled(importer, "B", 2, "dev", 1, "b", "1"));
  ASSERT_NO_FATAL_FAILURE(ShareMapped(importer, "B", creator, "bi", 2, "0"));
}

void JobTest::MulticastTeam(Worker& creator, Worker& member, const std::string& mc,
                            const std::string& creator_memory, const std::string& member_memory) {
  ASSERT_EQ(OkValue(Ask(creator, "mccreate " + mc + " 2 2")).rfind("0x", 0), 0u);
  ASSERT_NO_FATAL_FAILURE(Share(creator, mc, member));
  ASSERT_EQ(Ask(creator, "mcadd " + mc + " 0"), "ok");
  ASSERT_EQ(Ask(member, "mcadd " + mc + " 1"), "ok");
  ASSERT_EQ(Ask(creator, "mcbind " + mc + " 0 " + creator_memory + " 2"), "ok");
  ASSERT_EQ(Ask(member, "mcbind " + mc + " 0 " + member_memory + " 2"), "ok");
}

void JobTest::Fill(Worker& w, const std::string& view) {
  for (const auto& v : views_) {
    if (v.worker == &w && v.view == view) {
      ASSERT_EQ(Ask(w, "fill " + view + " " + std::to_string(seeds_.at(v.allocation))), "ok");
      return;
    }
  }
  FAIL() << "no view " << view << " in " << w.name;
}

void JobTest::Unmap(Worker& w, const std::string& view) {
  ASSERT_EQ(Ask(w, "unmap " + view), "ok") << w.name;
  std::erase_if(views_, [&](const ViewRecord& v) { return v.worker == &w && v.view == view; });
}

void JobTest::Release(Worker& w, const std::string& allocation, bool freed) {
  ASSERT_EQ(Ask(w, "release " + allocation), "ok") << w.name;
  if (freed) device_allocations_.erase(allocation);
}

void JobTest::CheckEveryByte() {
  for (const auto& v : views_) {
    if (v.worker->pid <= 0) continue;
    EXPECT_EQ(Ask(*v.worker, "check " + v.view + " " + std::to_string(seeds_.at(v.allocation))),
              "ok")
        << v.worker->name << " view " << v.view << " of " << v.allocation;
  }
}

Snapshot JobTest::Snap() {
  Snapshot snap;
  for (const auto& v : views_) {
    ViewFacts f;
    if (v.worker->pid > 0) {
      const std::string info = Ask(*v.worker, "info " + v.view);
      const auto w = Words(info);
      EXPECT_EQ(w.size(), 9u) << v.worker->name << " info " << v.view << ": " << info;
      if (w.size() == 9 && w[0] == "ok") {
        f.va = std::stoull(w[1], nullptr, 16);
        f.size = std::stoull(w[2]);
        f.offset = std::stoull(w[3]);
        f.allocation_id = std::stoull(w[4]);
        f.location_type = std::stoi(w[5]);
        f.location_id = std::stoi(w[6]);
        f.access[0] = std::stoi(w[7]);
        f.access[1] = std::stoi(w[8]);
      }
      f.retained = OkValue(Ask(*v.worker, "retain " + v.view));
      EXPECT_FALSE(f.retained.empty()) << v.worker->name << " retain " << v.view;
      EXPECT_EQ(f.size, v.mib << 20) << v.worker->name << " " << v.view;
      EXPECT_EQ(f.offset, v.offset_mib << 20) << v.worker->name << " " << v.view;
    }
    snap.push_back(f);
  }
  return snap;
}

void JobTest::ExpectSameLayout(const Snapshot& before, const Snapshot& after) {
  ASSERT_EQ(before.size(), after.size());
  std::set<uint64_t> old_ids;
  for (const auto& f : before) old_ids.insert(f.allocation_id);
  for (size_t i = 0; i < before.size(); ++i) {
    const ViewRecord& v = views_[i];
    if (v.worker->pid <= 0) continue;
    SCOPED_TRACE(v.worker->name + " view " + v.view + " of " + v.allocation);
    const ViewFacts &b = before[i], &a = after[i];
    EXPECT_EQ(a.va, b.va);
    EXPECT_EQ(a.size, b.size);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(a.retained, b.retained) << "the application's handle changed";
    EXPECT_EQ(a.location_type, b.location_type);
    // A restore onto other GPUs keeps the process's ordinals (DRIVER-FACTS F7). Memory
    // imported from a GPU the process does not see (CUDA_VISIBLE_DEVICES) is named by that
    // GPU's index, which follows the memory (Worker::physical and device_allocations_ are
    // where things are now).
    const auto home = device_allocations_.find(v.allocation);
    const std::vector<int>& sees = v.worker->physical;
    if (!sees.empty() && home != device_allocations_.end() &&
        std::find(sees.begin(), sees.end(), home->second.second) == sees.end()) {
      EXPECT_EQ(a.location_id, home->second.second) << "a GPU it does not see";
    } else {
      EXPECT_EQ(a.location_id, b.location_id);
    }
    for (int d = 0; d < 2; ++d) EXPECT_EQ(a.access[d], b.access[d]) << "device " << d;
    EXPECT_FALSE(old_ids.contains(a.allocation_id)) << "not a fresh allocation";
    for (size_t j = 0; j < before.size(); ++j) {
      if (views_[j].worker->pid <= 0) continue;
      EXPECT_EQ(a.allocation_id == after[j].allocation_id,
                b.allocation_id == before[j].allocation_id)
          << "sharing with " << views_[j].worker->name << " view " << views_[j].view;
    }
  }
}

void JobTest::CrossWrite(Worker& a, const std::string& view_a, Worker& b,
                         const std::string& view_b) {
  const ViewRecord *ra = nullptr, *rb = nullptr;
  for (const auto& v : views_) {
    if (v.worker == &a && v.view == view_a) ra = &v;
    if (v.worker == &b && v.view == view_b) rb = &v;
  }
  ASSERT_TRUE(ra != nullptr && rb != nullptr && ra->allocation == rb->allocation);
  // A word inside both views, counted in the allocation, then from each view's start.
  const size_t first = std::max(ra->offset_mib, rb->offset_mib) << 20;
  const size_t last = std::min(ra->offset_mib + ra->mib, rb->offset_mib + rb->mib) << 20;
  ASSERT_LT(first, last) << view_a << " and " << view_b << " do not overlap";
  const size_t word = (first + (last - first) / 2) / 4 + 3;
  const std::string wa = std::to_string(word - (ra->offset_mib << 20) / 4);
  const std::string wb = std::to_string(word - (rb->offset_mib << 20) / 4);
  const std::string original = OkValue(Ask(b, "read " + view_b + " " + wb));
  ASSERT_FALSE(original.empty());
  const std::string value = std::to_string(0xc0ffee00u + static_cast<uint32_t>(word % 251));
  ASSERT_NE(value, original);
  EXPECT_EQ(Ask(a, "write " + view_a + " " + wa + " " + value), "ok");
  EXPECT_EQ(Ask(b, "read " + view_b + " " + wb), "ok " + value)
      << a.name << " " << view_a << " -> " << b.name << " " << view_b;
  EXPECT_EQ(Ask(b, "write " + view_b + " " + wb + " " + original), "ok");
  EXPECT_EQ(Ask(a, "read " + view_a + " " + wa), "ok " + original)
      << b.name << " " << view_b << " -> " << a.name << " " << view_a;
}

Ran JobTest::Cusnap(const std::vector<std::string>& args) { return CusnapSignalled(args, "", 0); }

Ran JobTest::CusnapSignalled(const std::vector<std::string>& args, const std::string& after,
                             int signo, int settle_ms, int times) {
  bool signalled = signo == 0;
  // A whole line of stdout that starts with `after`.
  const auto printed = [&](const std::string& out) {
    for (size_t at = 0; at < out.size();) {
      const size_t end = out.find('\n', at);
      if (end == std::string::npos) return false;
      if (out.compare(at, after.size(), after) == 0) return true;
      at = end + 1;
    }
    return false;
  };
  const Ran r = CusnapWatched(args, [&](pid_t pid, const Ran& so_far) {
    if (signalled || !printed(so_far.out)) return;
    signalled = true;
    for (int k = 0; k < times; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
      signalled = ::kill(pid, signo) == 0 && signalled;
    }
  });
  EXPECT_TRUE(signalled) << "cusnap " << args.front() << " never printed a line starting with '"
                         << after << "': no signal sent\n" << r.out << r.err;
  return r;
}

Ran JobTest::CusnapWatched(const std::vector<std::string>& args,
                           const std::function<void(pid_t, const Ran&)>& watch) {
  int out[2], err[2];
  Ran r;
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return r;
  std::vector<std::string> argv;
  if (!cusnap_env_.empty()) {
    argv.push_back("/usr/bin/env");
    argv.insert(argv.end(), cusnap_env_.begin(), cusnap_env_.end());
  }
  argv.push_back(Env("CUSNAP_TEST_BIN_DIR") + "/cusnap");
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = Spawn(argv, {{out[1], 1}, {err[1], 2}});
  ::close(out[1]);
  ::close(err[1]);
  EXPECT_GT(pid, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open = 2;
  while (open > 0 && pid > 0) {
    const int rc = ::poll(fds, 2, LeftMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      ADD_FAILURE() << "cusnap " << args.front() << " did not finish within " << kWaitMs << " ms";
      ::kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
        watch(pid, r);
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  if (pid > 0) {
    const int status = Reap(pid, kWaitMs);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return r;
}

std::vector<Worker*> JobTest::Live() {
  std::vector<Worker*> live;
  for (auto& w : workers_) {
    if (w.pid > 0) live.push_back(&w);
  }
  return live;
}

size_t JobTest::LiveParticipants() {
  size_t n = 0;
  for (const Worker* w : Live()) n += w->shim ? 1 : 0;
  return n;
}

std::string JobTest::PidArg() const { return std::to_string(::getpid()); }

Ran JobTest::Checkpoint(const std::string& state) {
  std::vector<std::string> args = {"checkpoint"};
  args.insert(args.end(), target_.begin(), target_.end());
  args.insert(args.end(), {"--state-dir", state});
  return Cusnap(args);
}

Ran JobTest::Restore(const std::string& state, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"restore"};
  args.insert(args.end(), target_.begin(), target_.end());
  args.insert(args.end(), {"--state-dir", state});
  args.insert(args.end(), extra.begin(), extra.end());
  return Cusnap(args);
}

std::vector<uint64_t> JobTest::UsedBytes() {
  Worker& controller = Start("controller", 0, /*bare=*/true);
  const auto w = Words(Ask(controller, "meminfo"));
  // The controller is a CUDA process without an endpoint: gone before the next cusnap command.
  EXPECT_EQ(Stop(controller), 0);
  std::vector<uint64_t> used;
  EXPECT_TRUE(!w.empty() && w[0] == "ok");
  for (size_t i = 1; i < w.size(); ++i) used.push_back(std::stoull(w[i]));
  return used;
}

std::vector<uint64_t> JobTest::CreatedDeviceBytes() const {
  std::vector<uint64_t> bytes(device_count_, 0);
  for (const auto& [name, where] : device_allocations_) {
    bytes.at(static_cast<size_t>(where.second)) += where.first << 20;
  }
  return bytes;
}

std::vector<std::string> JobTest::MachineUuids() {
  Worker& controller = Start("controller", 0, /*bare=*/true);
  const auto w = Words(Ask(controller, "uuids"));
  EXPECT_EQ(Stop(controller), 0);
  EXPECT_TRUE(!w.empty() && w[0] == "ok");
  std::vector<std::string> uuids;
  for (size_t i = 1; i < w.size(); ++i) {
    // 32 hex digits -> "GPU-" 8-4-4-4-12, as nvidia-smi and --device-map write it.
    std::string text = "GPU-";
    for (size_t k = 0; k < w[i].size(); ++k) {
      if (k == 8 || k == 12 || k == 16 || k == 20) text += '-';
      text += w[i][k];
    }
    uuids.push_back(text);
  }
  return uuids;
}

std::vector<std::string> JobTest::Phases() {
  const Ran st = Cusnap({"status", "--all", "--json"});
  EXPECT_EQ(st.status, 0) << st.err;
  std::vector<std::string> phases;
  const auto doc = nlohmann::json::parse(st.out, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc["participants"].is_array()) {
    ADD_FAILURE() << "status --json: " << st.out;
    return phases;
  }
  for (const auto& p : doc["participants"]) phases.push_back(p.value("phase", "?"));
  return phases;
}

int JobTest::NativeState(pid_t pid) {
  Worker& controller = Start("controller", 0, /*bare=*/true);
  const std::string state = OkValue(Ask(controller, "state " + std::to_string(pid)));
  EXPECT_EQ(Stop(controller), 0);
  return state.empty() ? -1 : std::stoi(state);
}

void JobTest::Cycle(const std::string& state, const std::vector<std::string>& restore_extra,
                    const std::map<int, int>& device_map) {
  const Snapshot before = Suspend(state);
  if (HasFatalFailure()) return;
  Resume(state, before, restore_extra, device_map);
}

Snapshot JobTest::Suspend(const std::string& state) {
  const Snapshot before = Snap();
  EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
  const Ran ck = Checkpoint(state);
  if (std::getenv("CUSNAP_JOB_TRACE") != nullptr) std::fprintf(stderr, "%s", ck.out.c_str());
  EXPECT_EQ(ck.status, 0) << ck.out << ck.err;
  if (ck.status != 0) {
    ADD_FAILURE() << "checkpoint failed";
    return before;
  }
  EXPECT_THAT(ck.out, HasSubstr("driver: simulated\n"));
  EXPECT_THAT(ck.out, HasSubstr("checkpoint: done"));
  ExpectSuspended();
  return before;
}

void JobTest::ExpectSuspended() {
  EXPECT_EQ(UsedBytes(), std::vector<uint64_t>(device_count_, 0)) << "device memory still in use";
  for (Worker* w : Live()) {
    if (!w->cuda) continue;
    EXPECT_EQ(Ask(*w, "held"), "ok 0 0") << w->name << " still holds driver memory";
    EXPECT_EQ(NativeState(w->pid), kStateCheckpointed) << w->name;
  }
  EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "released"));
}

void JobTest::Resume(const std::string& state, const Snapshot& before,
                     const std::vector<std::string>& restore_extra,
                     const std::map<int, int>& device_map) {
  const Ran rs = Restore(state, restore_extra);
  ASSERT_EQ(rs.status, 0) << rs.out << rs.err;
  EXPECT_THAT(rs.out, HasSubstr("restore: done"));
  ExpectResumed(before, device_map);
}

void JobTest::ExpectResumed(const Snapshot& before, const std::map<int, int>& device_map) {
  // The memory moved between the physical GPUs (UsedBytes asks a fresh process, whose
  // ordinals are the physical GPUs); the workers' ordinals did not change.
  for (auto& [name, where] : device_allocations_) {
    if (const auto it = device_map.find(where.second); it != device_map.end()) {
      where.second = it->second;
    }
  }
  for (Worker& w : workers_) {
    for (int& gpu : w.physical) {
      if (const auto it = device_map.find(gpu); it != device_map.end()) gpu = it->second;
    }
  }
  EXPECT_EQ(UsedBytes(), CreatedDeviceBytes());
  for (Worker* w : Live()) {
    if (!w->cuda) continue;
    EXPECT_EQ(NativeState(w->pid), kStateRunning) << w->name;
  }
  EXPECT_EQ(Phases(), std::vector<std::string>(LiveParticipants(), "active"));
  CheckEveryByte();
  ExpectSameLayout(before, Snap());
  // Writes cross between every pair of processes sharing bytes.
  for (size_t i = 0; i < views_.size(); ++i) {
    for (size_t j = i + 1; j < views_.size(); ++j) {
      const ViewRecord &a = views_[i], &b = views_[j];
      if (a.allocation != b.allocation || a.worker == b.worker) continue;
      if (a.worker->pid <= 0 || b.worker->pid <= 0) continue;
      const bool overlap = std::max(a.offset_mib, b.offset_mib) <
                           std::min(a.offset_mib + a.mib, b.offset_mib + b.mib);
      if (overlap) CrossWrite(*a.worker, a.view, *b.worker, b.view);
    }
  }
}

void BindDeadSocket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path) << path;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  ::close(fd);
  ASSERT_EQ(bound, 0) << path << ": " << std::strerror(error);
}

}  // namespace jobtest
