// Attacks on a running job, with the real `cusnap` and shim on the simulated
// driver: idle connections held open on every endpoint while `status`, `checkpoint` and
// `restore` run (one thread per connection: nothing waits behind them); a control directory
// that is not private, is a symbolic link or belongs to another user, refused by the CLI and
// by the shim; a fake endpoint of another process, refused by its peer credentials.
#include <cuda.h>
#include <gmock/gmock.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <cstdlib>

#include "common/socket.h"
#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

class CliJobSecurity : public JobTest {
 protected:
  /// Opens `count` connections to `pid`'s endpoint and sends nothing on them.
  void HoldIdle(pid_t pid, int count) {
    const std::string path = Env("CUSNAP_CONTROL_DIR") + "/" + std::to_string(pid) + ".sock";
    for (int i = 0; i < count; ++i) {
      auto fd = cusnap::ConnectSeqpacket(path, cusnap::Deadline::AfterMs(2000));
      ASSERT_TRUE(fd.ok()) << fd.error().message;
      idle_.push_back(std::move(*fd));
    }
  }
  static std::string Env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
  }
  /// Runs `cusnap status` with CUSNAP_CONTROL_DIR set to `control`.
  Ran StatusIn(const std::string& control) {
    const std::string saved = Env("CUSNAP_CONTROL_DIR");
    ::setenv("CUSNAP_CONTROL_DIR", control.c_str(), 1);
    Ran r = Cusnap({"status"});
    ::setenv("CUSNAP_CONTROL_DIR", saved.c_str(), 1);
    return r;
  }
  std::vector<cusnap::UniqueFd> idle_;
};

TEST_F(CliJobSecurity, IdleConnectionsBlockNeitherStatusNorCheckpointNorRestore) {
  Worker& creator = Start("creator", 1);
  Worker& importer = Start("importer", 0);
  ASSERT_NO_FATAL_FAILURE(Create(creator, "H", 2, "host", 0));  // host NUMA memory, shared
  ASSERT_NO_FATAL_FAILURE(Share(creator, "H", importer));
  for (Worker* w : {&creator, &importer}) ASSERT_NO_FATAL_FAILURE(Map(*w, "h", "H", 0, 2, "0,1"));
  ASSERT_NO_FATAL_FAILURE(Fill(importer, "h"));
  for (Worker* w : {&creator, &importer}) ASSERT_NO_FATAL_FAILURE(HoldIdle(w->pid, 6));

  // With one thread for every connection and a 5 s read deadline, four idle ones would make
  // `status` fail.
  const auto started = std::chrono::steady_clock::now();
  const Ran status = Cusnap({"status", "--all"});
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("pid " + std::to_string(importer.pid)));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));

  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  idle_.clear();
  for (Worker* w : {&creator, &importer}) ASSERT_NO_FATAL_FAILURE(HoldIdle(w->pid, 6));
  // The importer fetches a fresh descriptor from the creator during restore: not behind the
  // idle connections.
  ASSERT_NO_FATAL_FAILURE(Resume(state, before));
}

TEST_F(CliJobSecurity, APreCreatedControlDirectoryThatIsNotPrivateIsRefused) {
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0755), 0);
  const Ran status = StatusIn(open_dir);
  EXPECT_NE(status.status, 0);
  EXPECT_THAT(status.err, HasSubstr("control directory " + open_dir +
                                    " is unsafe: its mode is 0755, not 0700"));

  // `cusnap run` does not start a job there.
  const std::string saved = Env("CUSNAP_CONTROL_DIR");
  ::setenv("CUSNAP_CONTROL_DIR", open_dir.c_str(), 1);
  const std::string marker = dir_ + "/ran";
  const Ran run = Cusnap({"run", "--", "touch", marker});
  EXPECT_EQ(run.status, 2);
  EXPECT_THAT(run.err, HasSubstr("cusnap run: control directory " + open_dir +
                                 " is unsafe: its mode is 0755, not 0700"));
  EXPECT_THAT(run.err, HasSubstr("; the job was not started"));
  EXPECT_NE(::access(marker.c_str(), F_OK), 0);

  // A shim that gets there anyway (preloaded by hand) starts no endpoint (its log says why),
  // and the directory keeps its mode.
  Worker& w = StartProgram("worker", {"/usr/bin/env", "LD_PRELOAD=" + Env("CUSNAP_TEST_SHIM"),
                                      Env("CUSNAP_TEST_BIN_DIR") + "/job_worker", "0"});
  ::setenv("CUSNAP_CONTROL_DIR", saved.c_str(), 1);
  ASSERT_EQ(Ask(w, ""), "ready");
  ASSERT_NO_FATAL_FAILURE(Create(w, "A", 2, "dev", 0));
  struct stat st {};
  EXPECT_NE(::stat((open_dir + "/" + std::to_string(w.pid) + ".sock").c_str(), &st), 0);
  ASSERT_EQ(::stat(open_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

TEST_F(CliJobSecurity, ASymlinkedControlDirectoryIsNeverFollowed) {
  const std::string real = dir_ + "/real";
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  const Ran status = StatusIn(link);
  EXPECT_NE(status.status, 0);
  EXPECT_THAT(status.err, HasSubstr("control directory " + link + " is a symbolic link: refused"));
}

TEST_F(CliJobSecurity, AControlDirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string theirs = dir_ + "/theirs";
  ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  const Ran status = StatusIn(theirs);
  EXPECT_NE(status.status, 0);
  EXPECT_THAT(status.err, HasSubstr("control directory " + theirs +
                                    " is unsafe: it is owned by uid 65534, not by this user (uid 0)"));
}

TEST_F(CliJobSecurity, AFakeEndpointOfAnotherProcessIsRefusedBeforeAnythingIsSent) {
  // A job whose endpoint socket is bound by someone else (this test process): checkpoint must
  // not take the answer of the fake for the job's.
  Worker& w = Start("worker", 0, /*bare=*/true);
  const std::string path = Env("CUSNAP_CONTROL_DIR") + "/" + std::to_string(w.pid) + ".sock";
  auto fake = cusnap::ListenSeqpacket(path, 8);
  ASSERT_TRUE(fake.ok()) << fake.error().message;
  const Ran ck = Cusnap({"checkpoint", "--pid", std::to_string(w.pid), "--state-dir", dir_ + "/s"});
  EXPECT_NE(ck.status, 0);
  EXPECT_THAT(ck.err, HasSubstr("the endpoint of pid " + std::to_string(w.pid) +
                                " is answered by pid " + std::to_string(::getpid())));
  ::unlink(path.c_str());
}


TEST_F(CliJobSecurity, AnOversizedRequestIsRefusedAndTheEndpointServesOn) {
  Worker& w = Start("worker", 0);
  ASSERT_NO_FATAL_FAILURE(Create(w, "A", 2, "dev", 0));  // the endpoint starts with tracking
  const std::string path = Env("CUSNAP_CONTROL_DIR") + "/" + std::to_string(w.pid) + ".sock";
  auto fd = cusnap::ConnectSeqpacket(path, cusnap::Deadline::AfterMs(2000));
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  cusnap::proto::Message huge;
  huge.op = cusnap::proto::Op::kIdentify;
  huge.payload.assign(16u << 20, 'x');  // 16 MiB; a request is a few fields
  const cusnap::Status sent = cusnap::SendMessage(fd->get(), huge, cusnap::Deadline::AfterMs(5000));
  EXPECT_FALSE(sent.ok());  // the endpoint stopped reading at 64 KiB and closed the connection
  auto reply = cusnap::ReceiveMessage(fd->get(), cusnap::Deadline::AfterMs(5000));
  EXPECT_FALSE(reply.ok());
  // And it answers the next client.
  const Ran status = Cusnap({"status", "--pid", std::to_string(w.pid)});
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("pid " + std::to_string(w.pid)));
}


// A cuMemSetAccess the driver rejected changed nothing, in the driver and in the shim's
// record (a poisoned record would refuse every later checkpoint); and HOST / HOST_NUMA
// descriptors, one host access in the driver (F12), read the same after a restore.
TEST_F(CliJobSecurity, RejectedAccessLeavesNoTraceAndHostAccessSurvivesARestore) {
  Worker& w = Start("worker", 0);
  ASSERT_NO_FATAL_FAILURE(Create(w, "H", 2, "host", 0));
  ASSERT_NO_FATAL_FAILURE(Map(w, "h", "H", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(w, "h"));
  const std::string rw = std::to_string(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const std::string host = std::to_string(CU_MEM_LOCATION_TYPE_HOST);
  const std::string numa = std::to_string(CU_MEM_LOCATION_TYPE_HOST_NUMA);
  const std::string device = std::to_string(CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(Ask(w, "access h " + device + " 0 7"), "ok 1");   // flags 7: INVALID_VALUE
  EXPECT_EQ(Ask(w, "access h " + device + " 99 1"), "ok 1");  // INVALID_VALUE (F12b)
  // HOST READ, HOST_NUMA RW, HOST NONE: the last one is what every read answers.
  EXPECT_EQ(Ask(w, "access h " + host + " 0 1"), "ok 0");
  EXPECT_EQ(Ask(w, "access h " + numa + " 0 " + rw), "ok 0");
  EXPECT_EQ(Ask(w, "access h " + host + " 0 0"), "ok 0");
  const std::vector<std::string> asked = {device + " 0", device + " 1", host + " 0", numa + " 0"};
  std::vector<std::string> before;
  for (const std::string& at : asked) before.push_back(Ask(w, "getaccess h " + at));
  EXPECT_EQ(before[3], "ok 0 0");  // the host access is NONE

  const std::string state = dir_ + "/state";
  const Ran ck = Checkpoint(state);  // no "access ... is unknown" refusal
  ASSERT_EQ(ck.status, 0) << ck.err;
  const Ran rs = Restore(state);
  ASSERT_EQ(rs.status, 0) << rs.err;
  for (size_t i = 0; i < asked.size(); ++i) {
    EXPECT_EQ(Ask(w, "getaccess h " + asked[i]), before[i]) << asked[i];
  }
  CheckEveryByte();
}

}  // namespace
}  // namespace jobtest
