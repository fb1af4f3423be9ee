// Tickets: sealed, read without moving the file offset, told apart from other descriptors,
// and malformed tickets refused with a clear error.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/ticket.h"
#include "printers.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

Ticket Sample() {
  Ticket t;
  t.id.creator_pid = 1234;
  t.id.creator_start = 98765;
  t.id.local_id = 42;
  t.kind = TicketKind::kUnicast;
  t.capability = proto::Capability{{0x0123456789abcdefULL, 0xfedcba9876543210ULL}};
  return t;
}

// A memfd holding `layout`, sealed with `seals` (for forged tickets).
int Forge(const void* data, size_t size, int seals) {
  const int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(pwrite(fd, data, size, 0), static_cast<ssize_t>(size));
  if (seals != 0) {
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, seals), 0);
  }
  return fd;
}

TicketLayout SampleLayout() {
  TicketLayout layout;
  std::memset(&layout, 0, sizeof layout);
  layout.magic = kTicketMagic;
  layout.version = kTicketVersion;
  layout.kind = 1;
  layout.creator_pid = 1234;
  layout.creator_start = 98765;
  layout.local_id = 42;
  layout.capability[0] = 7;
  return layout;
}

TEST(Ticket, RoundTripsAndIsSealed) {
  Result<int> fd = CreateTicket(Sample());
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_EQ(fcntl(*fd, F_GET_SEALS), F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(fcntl(*fd, F_GETFD) & FD_CLOEXEC, 0);
  const char byte = 1;
  EXPECT_EQ(pwrite(*fd, &byte, 1, 0), -1);  // F_SEAL_WRITE
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(*fd, 0), 0);          // F_SEAL_SHRINK

  ASSERT_EQ(lseek(*fd, 7, SEEK_SET), 7);
  auto ticket = ReadTicket(*fd);
  ASSERT_TRUE(ticket.ok()) << ticket.error().message;
  ASSERT_TRUE(ticket->has_value());
  EXPECT_EQ((*ticket)->id.creator_pid, 1234);
  EXPECT_EQ((*ticket)->id.creator_start, 98765u);
  EXPECT_EQ((*ticket)->id.local_id, 42u);
  EXPECT_EQ((*ticket)->kind, TicketKind::kUnicast);
  EXPECT_EQ((*ticket)->capability.word[0], 0x0123456789abcdefULL);
  EXPECT_EQ((*ticket)->capability.word[1], 0xfedcba9876543210ULL);
  EXPECT_EQ(lseek(*fd, 0, SEEK_CUR), 7);  // the application's offset did not move
  close(*fd);
}

TEST(Ticket, OtherDescriptorsAreNotTickets) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  auto from_pipe = ReadTicket(pipe_fds[0]);
  ASSERT_TRUE(from_pipe.ok());
  EXPECT_FALSE(from_pipe->has_value());
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  const TicketLayout layout = SampleLayout();
  const int all_seals = TicketSeals();
  // Right bytes but unsealed (what a raw memfd export looks like), or missing one seal.
  for (int seals : {0, all_seals & ~F_SEAL_SEAL, all_seals & ~F_SEAL_WRITE}) {
    const int fd = Forge(&layout, sizeof layout, seals);
    auto read = ReadTicket(fd);
    ASSERT_TRUE(read.ok());
    EXPECT_FALSE(read->has_value()) << "seals " << seals;
    close(fd);
  }
  // Sealed, but the wrong size or the wrong magic.
  char longer[sizeof layout + 8] = {};
  std::memcpy(longer, &layout, sizeof layout);
  TicketLayout other = layout;
  other.magic = 0x12345678;
  for (auto [data, size] : {std::pair<const void*, size_t>{longer, sizeof longer},
                            std::pair<const void*, size_t>{&other, sizeof other}}) {
    const int fd = Forge(data, size, all_seals);
    auto read = ReadTicket(fd);
    ASSERT_TRUE(read.ok());
    EXPECT_FALSE(read->has_value());
    close(fd);
  }
  auto closed = ReadTicket(-1);
  ASSERT_TRUE(closed.ok());
  EXPECT_FALSE(closed->has_value());
}

TEST(Ticket, MalformedTicketsAreRefused) {
  struct Case {
    const char* name;
    void (*spoil)(TicketLayout&);
    const char* expect;
  };
  const Case cases[] = {
      {"version", [](TicketLayout& l) { l.version = 9; }, "unsupported version 9"},
      {"kind", [](TicketLayout& l) { l.kind = 3; }, "unknown kind 3"},
      {"pid", [](TicketLayout& l) { l.creator_pid = 0; }, "names no creator"},
      {"start", [](TicketLayout& l) { l.creator_start = 0; }, "names no creator"},
      {"object", [](TicketLayout& l) { l.local_id = 0; }, "names no creator"},
      {"reserved", [](TicketLayout& l) { l.mc_flags = 1;  /* multicast field in a unicast ticket */ }, "reserved"},
      {"capability", [](TicketLayout& l) { l.capability[0] = 0; }, "carries no capability"},
  };
  for (const Case& c : cases) {
    TicketLayout layout = SampleLayout();
    c.spoil(layout);
    const int fd = Forge(&layout, sizeof layout, TicketSeals());
    auto read = ReadTicket(fd);
    ASSERT_FALSE(read.ok()) << c.name;
    EXPECT_THAT(read.error().message, HasSubstr(c.expect)) << c.name;
    close(fd);
  }
}

// A version-1 ticket (64 bytes, no capability) from an older cusnap is a ticket, refused by
// its version rather than taken for a CUDA descriptor.
TEST(Ticket, VersionOneTicketIsRefusedByItsVersion) {
  TicketLayout layout = SampleLayout();
  layout.version = 1;
  const int fd = Forge(&layout, 64, TicketSeals());
  auto read = ReadTicket(fd);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("unsupported version 1"));
  close(fd);
}

TEST(Ticket, MulticastKindRoundTrips) {
  Ticket t = Sample();
  t.kind = TicketKind::kMulticast;
  Result<int> fd = CreateTicket(t);
  ASSERT_TRUE(fd.ok());
  auto read = ReadTicket(*fd);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->kind, TicketKind::kMulticast);
  close(*fd);
}

}  // namespace
}  // namespace cusnap
