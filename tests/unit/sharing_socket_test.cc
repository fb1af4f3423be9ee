// Socket helpers and the endpoint client: deadlines, descriptor passing, MSG_NOSIGNAL with a
// closed peer, multi-packet messages, the protocol version and size bound, the messages'
// encoding and decoding, peer credentials, and Request against a small server.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/endpoint_client.h"
#include "common/socket.h"
#include "printers.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

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

// True when `fd` names an open descriptor.
bool IsOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST(UniqueFd, ClosesWhatItOwnsAndNothingElse) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  {
    UniqueFd read_end(pipe_fds[0]);
    UniqueFd moved = std::move(read_end);
    EXPECT_FALSE(read_end.valid());  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(moved.get(), pipe_fds[0]);
    UniqueFd write_end(pipe_fds[1]);
    EXPECT_EQ(write_end.release(), pipe_fds[1]);
    EXPECT_EQ(write_end.get(), -1);
  }
  EXPECT_FALSE(IsOpen(pipe_fds[0]));  // closed once, by its last owner
  EXPECT_TRUE(IsOpen(pipe_fds[1]));   // released: the caller's to close
  close(pipe_fds[1]);
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
  proto::InspectReply sent;
  sent.records.resize(count);
  for (size_t i = 0; i < count; ++i) {
    std::memset(&sent.records[i], 0, sizeof(proto::Record));
    sent.records[i].address = 0x1000 * (i + 1);
  }
  proto::Importer importer{};
  importer.id = proto::ObjectId{4120, 0, 777, 3};
  importer.kind = 2;
  importer.pid = 4121;
  importer.start_time = 778;
  sent.importers = {importer};
  const proto::Message message = sent.Encode();
  std::thread sender([&] { EXPECT_TRUE(SendMessage(p.a, message, Deadline::AfterMs(10000)).ok()); });
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(10000));
  sender.join();
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->op, proto::Op::kInspect);
  EXPECT_FALSE(m->fd.valid());
  auto got = proto::InspectReply::Decode(*m);
  ASSERT_TRUE(got.ok()) << got.error().message;
  ASSERT_EQ(got->records.size(), count);
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(got->records[i].address, 0x1000 * (i + 1));
  ASSERT_EQ(got->importers.size(), 1u);
  EXPECT_EQ(got->importers[0].id.creator_pid, 4120);
  EXPECT_EQ(got->importers[0].id.creator_start, 777u);
  EXPECT_EQ(got->importers[0].id.local_id, 3u);
  EXPECT_EQ(got->importers[0].kind, 2u);
  EXPECT_EQ(got->importers[0].pid, 4121);
  EXPECT_EQ(got->importers[0].start_time, 778u);
}

TEST(Messages, ResourcesRequestAndReplyRoundTrip) {
  const proto::ResourcesRequest need{69206016, 3};
  auto got = proto::ResourcesRequest::Decode(need.Encode());
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->carrier_bytes, 69206016u);
  EXPECT_EQ(got->imports, 3u);
  proto::ResourcesReply have;
  have.descriptors_free = 1000;
  have.address_space_free = 8u << 20;
  auto back = proto::ResourcesReply::Decode(have.Encode());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->descriptors_free, 1000u);
  EXPECT_EQ(back->cgroup_memory_free, proto::ResourcesReply::kUnlimited);
  EXPECT_EQ(back->address_space_free, 8u << 20);
  // A shortfall comes back as the shim's refusal, whole.
  const proto::Message refused = proto::EncodeError(
      proto::Op::kCheckResources, Error{-1, "pid 7: not enough resources for the checkpoint"});
  auto no = proto::ResourcesReply::Decode(refused);
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.error().code, -1);
  EXPECT_EQ(no.error().message, "pid 7: not enough resources for the checkpoint");
}

// A packet's header as a peer of any version writes it.
proto::FrameHeader Frame(uint16_t version, proto::Op op, uint32_t size) {
  proto::FrameHeader h{};
  h.magic = proto::kMagic;
  h.version = version;
  h.op = static_cast<uint16_t>(op);
  h.size = size;
  return h;
}

TEST(Socket, MalformedPacketIsAProtocolError) {
  Pair p;
  const proto::FrameHeader h = Frame(proto::kVersion, proto::Op::kIdentify, 3);  // no payload
  ASSERT_TRUE(SendPacket(p.a, &h, sizeof h, -1, Deadline::AfterMs(1000)).ok());
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(1000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, EPROTO);
  EXPECT_THAT(m.error().message, HasSubstr("packet size does not match its header"));
}

TEST(Socket, PeerOfAnotherProtocolVersionIsRefusedNamingBoth) {
  Pair p;
  // Version 1's header was 256 bytes, magic, version and op at the same offsets.
  char v1[256] = {};
  const proto::FrameHeader h = Frame(1, proto::Op::kIdentify, 0);
  std::memcpy(v1, &h, sizeof h);
  ASSERT_TRUE(SendPacket(p.a, v1, sizeof v1, -1, Deadline::AfterMs(1000)).ok());
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(1000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, EPROTONOSUPPORT);
  EXPECT_THAT(m.error().message, HasSubstr("the peer speaks cusnap protocol version 1, this "
                                           "side version " + std::to_string(proto::kVersion)));
}

// Version 2 had the same framing, but its INSPECT replies carried no importers: refused too.
TEST(Socket, PeerOfProtocolVersion2IsRefusedNamingBoth) {
  Pair p;
  const proto::FrameHeader h = Frame(2, proto::Op::kInspect, 0);
  ASSERT_TRUE(SendPacket(p.a, &h, sizeof h, -1, Deadline::AfterMs(1000)).ok());
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(1000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, EPROTONOSUPPORT);
  EXPECT_THAT(m.error().message, HasSubstr("the peer speaks cusnap protocol version 2, this "
                                           "side version " + std::to_string(proto::kVersion)));
}

TEST(Socket, MessageLongerThanTheBoundIsRefused) {
  Pair p;
  // Packets flagged "more" without end: the receiver stops at proto::kMaxMessage.
  std::thread sender([&] {
    std::vector<char> packet(proto::kMaxPacket);
    proto::FrameHeader h = Frame(proto::kVersion, proto::Op::kInspect,
                                 static_cast<uint32_t>(packet.size() - sizeof h));
    h.flags = proto::kMore;
    std::memcpy(packet.data(), &h, sizeof h);
    for (size_t sent = 0; sent <= proto::kMaxMessage; sent += packet.size() - sizeof h) {
      if (!SendPacket(p.a, packet.data(), packet.size(), -1, Deadline::AfterMs(10000)).ok()) return;
    }
  });
  auto m = ReceiveMessage(p.b, Deadline::AfterMs(10000));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, EPROTO);
  EXPECT_THAT(m.error().message, HasSubstr("message longer than 134217728 bytes"));
  close(p.b);
  p.b = -1;
  sender.join();
}

TEST(Messages, ErrorsOfAnyLengthTravelWhole) {
  const std::string text = "pid 12345: " + std::string(5000, 'x') + " the end";
  const proto::Message reply = proto::EncodeError(proto::Op::kSave, Error{700, text});
  auto decoded = proto::StepReply::Decode(reply, proto::Op::kSave);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, 700);
  EXPECT_EQ(decoded.error().message, text);
}

TEST(Messages, ReplyToAnotherOpOrWithFieldsMissingIsRefused) {
  proto::StepReply step;
  step.state = proto::ShimState::kSaved;
  step.bytes = 42;
  auto other = proto::StepReply::Decode(step.Encode(proto::Op::kSave), proto::Op::kRelease);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().code, EPROTO);
  EXPECT_THAT(other.error().message, HasSubstr("the reply to RELEASE is a reply to SAVE"));
  proto::Message cut = step.Encode(proto::Op::kSave);
  cut.payload.pop_back();
  auto short_reply = proto::StepReply::Decode(cut, proto::Op::kSave);
  ASSERT_FALSE(short_reply.ok());
  EXPECT_THAT(short_reply.error().message, HasSubstr("malformed SAVE message"));
  auto good = proto::StepReply::Decode(step.Encode(proto::Op::kSave), proto::Op::kSave);
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(good->state, proto::ShimState::kSaved);
  EXPECT_EQ(good->bytes, 42u);
}

TEST(Messages, IdentifyReplyRoundTrips) {
  proto::IdentifyReply sent;
  sent.pid = 4120;
  sent.start_time = 777;
  sent.state = proto::ShimState::kRestored;
  sent.records = 5;
  sent.untracked_imports = 1;
  sent.tracked_bytes = 2u << 20;
  sent.created_total = 3;
  sent.created_host_numa = 1;
  sent.failure = "pid 4120: RELEASE failed";
  sent.untracked.resize(2);
  sent.untracked[1].address = 0x7f0000000000;
  auto got = proto::IdentifyReply::Decode(sent.Encode());
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->pid, 4120);
  EXPECT_EQ(got->start_time, 777u);
  EXPECT_EQ(got->state, proto::ShimState::kRestored);
  EXPECT_EQ(got->records, 5u);
  EXPECT_EQ(got->untracked_imports, 1u);
  EXPECT_EQ(got->tracked_bytes, 2u << 20);
  EXPECT_EQ(got->created_total, 3u);
  EXPECT_EQ(got->created_host_numa, 1u);
  EXPECT_EQ(got->failure, "pid 4120: RELEASE failed");
  ASSERT_EQ(got->untracked.size(), 2u);
  EXPECT_EQ(got->untracked[1].address, 0x7f0000000000u);
}

TEST(Messages, NamesComeFromTheSchemaLists) {
  EXPECT_STREQ(proto::OpName(proto::Op::kDetachMulticast), "DETACH_MULTICAST");
  EXPECT_STREQ(proto::ShimStateName(proto::ShimState::kRestored), "RESTORED");
  EXPECT_EQ(static_cast<uint32_t>(proto::ShimState::kRestored), 12u);
  EXPECT_STREQ(proto::ShimStateName(static_cast<proto::ShimState>(99)), "UNKNOWN");
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
  // Served by this process, so named after it: a client checks who answers.
  const std::string path = EndpointPath(dir, getpid());
  EXPECT_EQ(path, dir + "/" + std::to_string(getpid()) + ".sock");
  auto listener = ListenSeqpacket(path, 8);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  const proto::ObjectId id{12345, 0, 777, 9};
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      auto conn = AcceptConnection(listener->get(), Deadline::AfterMs(10000));
      ASSERT_TRUE(conn.ok());
      EXPECT_TRUE(CheckPeerCredentials(conn->get()).ok());
      auto request = ReceiveMessage(conn->get(), Deadline::AfterMs(10000));
      ASSERT_TRUE(request.ok());
      auto asked = proto::ExportRequest::Decode(*request);
      ASSERT_TRUE(asked.ok()) << asked.error().message;
      EXPECT_EQ(asked->id.local_id, 9u);
      EXPECT_EQ(asked->capability.word[0], 0xa1u);  // the capability travels whole
      EXPECT_EQ(asked->capability.word[1], 0xb2u);
      if (i == 0) {
        proto::ExportReply reply{asked->id, asked->kind, 4096, UniqueFd(dup(pipe_fds[1]))};
        EXPECT_TRUE(SendMessage(conn->get(), std::move(reply).Encode(), Deadline::AfterMs(10000)).ok());
      } else {
        const Error no{-1, "pid 12345: allocation 9 is not exported"};
        EXPECT_TRUE(SendMessage(conn->get(), proto::EncodeError(request->op, no),
                                Deadline::AfterMs(10000)).ok());
      }
    }
  });
  const proto::Message request = proto::ExportRequest{id, 1, proto::Capability{{0xa1, 0xb2}}}.Encode();
  auto reply = Request<proto::ExportReply>(path, request, 10000);
  ASSERT_TRUE(reply.ok()) << reply.error().message;
  EXPECT_EQ(reply->size, 4096u);
  EXPECT_EQ(reply->id.local_id, 9u);
  ASSERT_TRUE(reply->fd.valid());
  ASSERT_EQ(write(reply->fd.get(), "ok", 2), 2);
  char got[3] = {};
  ASSERT_EQ(read(pipe_fds[0], got, 2), 2);
  EXPECT_STREQ(got, "ok");

  auto refused = Request<proto::ExportReply>(path, request, 10000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, -1);
  EXPECT_EQ(refused.error().message, "pid 12345: allocation 9 is not exported");
  server.join();
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(EndpointClient, RequestToASilentServerTimesOut) {
  const std::string dir = TempDir();
  const std::string path = dir + "/silent.sock";
  auto listener = ListenSeqpacket(path, 8);
  ASSERT_TRUE(listener.ok());
  // The connection is queued in the backlog and never answered.
  auto reply = Request(path, proto::IdentifyRequest{}.Encode(), 100);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, ETIMEDOUT);
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
