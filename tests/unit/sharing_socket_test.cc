// Socket helpers and the endpoint client: deadlines, descriptor passing, MSG_NOSIGNAL with a
// closed peer, multi-packet messages, peer credentials, and Request against a small server.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/endpoint_client.h"
#include "common/socket.h"
#include "printers.h"

namespace cusnap {
namespace {

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
};

std::string TempDir() {
  char templ[] = "/tmp/cusnap-socket-test-XXXXXX";
  const char* dir = mkdtemp(templ);
  EXPECT_NE(dir, nullptr);
  return dir;
}

TEST(Socket, ReceiveGivesUpAtTheDeadline) {
  Pair p;
  char buf[16];
  int fd = -1;
  auto r = RecvPacket(p.a, buf, sizeof buf, &fd, Deadline::AfterMs(50));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ETIMEDOUT);
  EXPECT_EQ(fd, -1);
}

TEST(Socket, PassesADescriptor) {
  Pair p;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  const char hello[] = "hello";
  ASSERT_TRUE(SendPacket(p.a, hello, sizeof hello, pipe_fds[1], Deadline::AfterMs(5000)).ok());
  close(pipe_fds[1]);
  char buf[16] = {};
  int received = -1;
  auto r = RecvPacket(p.b, buf, sizeof buf, &received, Deadline::AfterMs(5000));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r, sizeof hello);
  EXPECT_STREQ(buf, "hello");
  ASSERT_GE(received, 0);
  EXPECT_NE(fcntl(received, F_GETFD) & FD_CLOEXEC, 0);
  ASSERT_EQ(write(received, "xyz", 3), 3);  // the received descriptor is the pipe's write end
  close(received);
  char got[4] = {};
  ASSERT_EQ(read(pipe_fds[0], got, 3), 3);
  EXPECT_STREQ(got, "xyz");
  close(pipe_fds[0]);
}

TEST(Socket, SendToAClosedPeerFailsWithoutSigpipe) {
  // SIGPIPE's default action would end this test program: getting EPIPE back proves
  // MSG_NOSIGNAL (the disposition is left untouched).
  Pair p;
  close(p.b);
  p.b = -1;
  const char data[] = "x";
  Status s = SendPacket(p.a, data, sizeof data, -1, Deadline::AfterMs(1000));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, EPIPE);
}

TEST(Socket, ReceiveFromAClosedPeerSaysSo) {
  Pair p;
  close(p.b);
  p.b = -1;
  char buf[8];
  int fd = -1;
  auto r = RecvPacket(p.a, buf, sizeof buf, &fd, Deadline::AfterMs(1000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ECONNRESET);
}

TEST(Socket, LongMessagesTravelInSeveralPackets) {
  Pair p;
  const size_t count = proto::kMaxRecordsPerMessage * 2 + 5;
  std::vector<proto::Record> records(count);
  for (size_t i = 0; i < count; ++i) {
    std::memset(&records[i], 0, sizeof(proto::Record));
    records[i].address = 0x1000 * (i + 1);
  }
  proto::Header h = MakeHeader(proto::Op::kInspect);
  h.arg[0] = 99;
  std::thread sender([&] {
    EXPECT_TRUE(SendMessage(p.a, h, records, -1, Deadline::AfterMs(10000)).ok());
  });
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(10000));
  sender.join();
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(static_cast<proto::Op>(m->header.op), proto::Op::kInspect);
  EXPECT_EQ(m->header.arg[0], 99u);
  EXPECT_EQ(m->header.flags & proto::kMore, 0u);
  ASSERT_EQ(m->records.size(), count);
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(m->records[i].address, 0x1000 * (i + 1));
  EXPECT_EQ(m->fd, -1);
}

TEST(Socket, MalformedPacketIsAProtocolError) {
  Pair p;
  proto::Header h = MakeHeader(proto::Op::kIdentify);
  h.count = 3;  // but no records follow
  ASSERT_TRUE(SendPacket(p.a, &h, sizeof h, -1, Deadline::AfterMs(1000)).ok());
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(1000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, EPROTO);
}

TEST(Socket, PeerCredentialsOfTheSameUserAreAccepted) {
  Pair p;
  EXPECT_TRUE(CheckPeerCredentials(p.a).ok());
}

TEST(Socket, ConnectToNobodyFails) {
  const std::string dir = TempDir();
  auto fd = ConnectSeqpacket(dir + "/none.sock", Deadline::AfterMs(1000));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code, ENOENT);
  auto too_long = ConnectSeqpacket("/" + std::string(200, 'x'), Deadline::AfterMs(1000));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.error().code, ENAMETOOLONG);
  rmdir(dir.c_str());
}

TEST(EndpointClient, RequestRoundTripWithDescriptorAndStatus) {
  const std::string dir = TempDir();
  const std::string path = EndpointPath(dir, 12345);
  EXPECT_EQ(path, dir + "/12345.sock");
  auto listener = ListenSeqpacket(path, 8);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      auto conn = AcceptConnection(*listener, Deadline::AfterMs(10000));
      ASSERT_TRUE(conn.ok());
      EXPECT_TRUE(CheckPeerCredentials(*conn).ok());
      auto request = ReceiveMessage(*conn, Deadline::AfterMs(10000));
      ASSERT_TRUE(request.ok());
      proto::Header reply = request->header;
      if (i == 0) {
        reply.arg[0] = request->header.arg[0] + 1;
        EXPECT_TRUE(SendMessage(*conn, reply, {}, pipe_fds[1], Deadline::AfterMs(10000)).ok());
      } else {
        reply.status = -1;
        SetHeaderText(reply, "pid 12345: allocation 9 is not exported");
        EXPECT_TRUE(SendMessage(*conn, reply, {}, -1, Deadline::AfterMs(10000)).ok());
      }
      close(*conn);
    }
  });
  proto::Header request = MakeHeader(proto::Op::kExport);
  request.arg[0] = 41;
  auto reply = Request(path, request, {}, 10000);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply->header.arg[0], 42u);
  ASSERT_GE(reply->fd, 0);
  ASSERT_EQ(write(reply->fd, "ok", 2), 2);
  char got[3] = {};
  ASSERT_EQ(read(pipe_fds[0], got, 2), 2);
  EXPECT_STREQ(got, "ok");
  close(reply->fd);

  auto refused = Request(path, request, {}, 10000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, -1);
  EXPECT_EQ(refused.error().message, "pid 12345: allocation 9 is not exported");
  server.join();
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  close(*listener);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(EndpointClient, RequestToASilentServerTimesOut) {
  const std::string dir = TempDir();
  const std::string path = dir + "/silent.sock";
  auto listener = ListenSeqpacket(path, 8);
  ASSERT_TRUE(listener.ok());
  // The connection is queued in the backlog and never answered.
  auto reply = Request(path, MakeHeader(proto::Op::kIdentify), {}, 100);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, ETIMEDOUT);
  close(*listener);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(EndpointClient, ControlDirFollowsTheEnvironment) {
  const char* saved = std::getenv("CUSNAP_CONTROL_DIR");
  const std::string keep = saved ? saved : "";
  const char* saved_xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string keep_xdg = saved_xdg ? saved_xdg : "";
  setenv("CUSNAP_CONTROL_DIR", "/some/where", 1);
  EXPECT_EQ(ControlDir(), "/some/where");
  unsetenv("CUSNAP_CONTROL_DIR");
  setenv("XDG_RUNTIME_DIR", "/run/user/77", 1);
  EXPECT_EQ(ControlDir(), "/run/user/77/cusnap");
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(ControlDir(), "/tmp/cusnap-" + std::to_string(geteuid()));
  if (saved) setenv("CUSNAP_CONTROL_DIR", keep.c_str(), 1);
  if (saved_xdg) setenv("XDG_RUNTIME_DIR", keep_xdg.c_str(), 1);
}

}  // namespace
}  // namespace cusnap
