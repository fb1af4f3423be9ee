// Trust, the common pieces: the control directory's checks (owner, mode 0700, never a
// followed symbolic link), the socket created 0600 whatever the umask, and clients that check
// who answers (SO_PEERCRED: uid, and the pid an endpoint's name promises).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "common/socket.h"

namespace cusnap {
namespace {

using ::testing::HasSubstr;

std::string Scratch() {
  char templ[] = "/tmp/cusnap-security-test-XXXXXX";
  const char* dir = mkdtemp(templ);
  EXPECT_NE(dir, nullptr);
  return dir;
}

TEST(ControlDir, OnlyOursWithMode0700Passes) {
  EXPECT_EQ(ControlDirProblem(1000, S_IFDIR | 0700, 1000), "");
  EXPECT_EQ(ControlDirProblem(1001, S_IFDIR | 0700, 1000),
            "it is owned by uid 1001, not by this user (uid 1000)");
  EXPECT_EQ(ControlDirProblem(0, S_IFDIR | 0700, 1000),
            "it is owned by uid 0, not by this user (uid 1000)");
  EXPECT_EQ(ControlDirProblem(1000, S_IFDIR | 0755, 1000), "its mode is 0755, not 0700");
  EXPECT_EQ(ControlDirProblem(1000, S_IFDIR | 01777, 1000), "its mode is 1777, not 0700");
  EXPECT_EQ(ControlDirProblem(1000, S_IFDIR | 0500, 1000), "its mode is 0500, not 0700");
}

TEST(ControlDir, AnOpenDirectoryIsRefusedAndKeepsItsMode) {
  const std::string dir = Scratch();
  ASSERT_EQ(chmod(dir.c_str(), 0711), 0);
  auto opened = MakeControlDir(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, EPERM);
  EXPECT_THAT(opened.error().message,
              HasSubstr("control directory " + dir + " is unsafe: its mode is 0711, not 0700"));
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_THAT(UnsafeControlDir(dir), HasSubstr("its mode is 0711"));
  EXPECT_EQ(UnsafeControlDir(dir + "/missing"), "");
  rmdir(dir.c_str());
}

TEST(ControlDir, ASymbolicLinkIsNeverFollowed) {
  const std::string dir = Scratch();
  const std::string link = dir + "-link";
  ASSERT_EQ(symlink(dir.c_str(), link.c_str()), 0);
  auto opened = OpenControlDir(link);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, ELOOP);
  EXPECT_THAT(opened.error().message, HasSubstr("control directory " + link + " is a symbolic link"));
  // The shim does not create anything behind it either.
  auto made = MakeControlDir(link);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, ELOOP);
  unlink(link.c_str());
  rmdir(dir.c_str());
}

TEST(ControlDir, AnotherUsersDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string dir = Scratch();
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  auto opened = OpenControlDir(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message, HasSubstr("it is owned by uid 65534, not by this user (uid 0)"));
  rmdir(dir.c_str());
}

TEST(ControlDir, CreatedWithMode0700WhateverTheUmask) {
  const std::string parent = Scratch();
  const std::string dir = parent + "/a/control";
  const mode_t old = umask(0277);
  auto made = MakeControlDir(dir);
  umask(old);
  ASSERT_TRUE(made.ok()) << made.error().message;
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  rmdir(dir.c_str());
  rmdir((parent + "/a").c_str());
  rmdir(parent.c_str());
}

TEST(ControlDir, ParentsFollowSshStrictModes) {
  EXPECT_EQ(AncestorProblem("/tmp", 0, S_IFDIR | 01777, 1000), "");  // sticky: /tmp
  EXPECT_EQ(AncestorProblem("/home/u", 1000, S_IFDIR | 0755, 1000), "");
  EXPECT_EQ(AncestorProblem("/run/user", 0, S_IFDIR | 0755, 1000), "");
  EXPECT_EQ(AncestorProblem("/x", 0, S_IFDIR | 0777, 1000),
            "its parent /x (mode 0777) can be written by other users and is not sticky");
  EXPECT_EQ(AncestorProblem("/x", 1000, S_IFDIR | 0775, 1000),
            "its parent /x (mode 0775) can be written by other users and is not sticky");
  EXPECT_EQ(AncestorProblem("/x", 1001, S_IFDIR | 0755, 1000),
            "its parent /x is owned by uid 1001, neither root nor this user (uid 1000)");
  EXPECT_EQ(AncestorProblem("/l", 1001, S_IFLNK | 0777, 1000),
            "its parent /l is owned by uid 1001, neither root nor this user (uid 1000)");
  EXPECT_EQ(AncestorProblem("/l", 1000, S_IFLNK | 0777, 1000), "");  // a link's mode is moot
}

TEST(ControlDir, AParentOthersCanWriteIsRefused) {
  const std::string parent = Scratch();
  const std::string dir = parent + "/control";
  ASSERT_TRUE(MakeControlDir(dir).ok());
  ASSERT_EQ(chmod(parent.c_str(), 0777), 0);
  const std::string why = "its parent " + parent + " (mode 0777) can be written by other users "
                          "and is not sticky";
  auto opened = OpenControlDir(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, EPERM);
  EXPECT_THAT(opened.error().message, HasSubstr("control directory " + dir + " is unsafe: " + why));
  EXPECT_THAT(UnsafeControlDir(dir), HasSubstr(why));
  // Not there yet: named before anything is created, and the shim creates nothing.
  EXPECT_THAT(UnsafeControlDir(parent + "/other"), HasSubstr("would be unsafe: " + why));
  auto made = MakeControlDir(parent + "/other/control");
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.error().code, EPERM);
  struct stat st;
  EXPECT_NE(stat((parent + "/other").c_str(), &st), 0);
  // The sticky bit (as on /tmp) makes it safe again.
  ASSERT_EQ(chmod(parent.c_str(), 01777), 0);
  EXPECT_TRUE(OpenControlDir(dir).ok());
  rmdir(dir.c_str());
  rmdir(parent.c_str());
}

TEST(ControlDir, ALinkedParentIsFollowedOnlyWhenOursAndChecked) {
  const std::string real = Scratch();
  const std::string link = real + "-link";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  ASSERT_TRUE(MakeControlDir(link + "/control").ok());  // our own link to our own directory
  EXPECT_EQ(ControlDirAncestorsProblem(link + "/control"), "");
  // The link's target is checked as a parent too.
  ASSERT_EQ(chmod(real.c_str(), 0777), 0);
  EXPECT_THAT(ControlDirAncestorsProblem(link + "/control"),
              HasSubstr("its parent " + real + " (mode 0777) can be written by other users"));
  EXPECT_FALSE(OpenControlDir(link + "/control").ok());
  ASSERT_EQ(chmod(real.c_str(), 0700), 0);
  if (geteuid() == 0) {  // a link another user planted (in /tmp, say) is never followed
    ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
    EXPECT_EQ(ControlDirAncestorsProblem(link + "/control"),
              "its parent " + link + " is owned by uid 65534, neither root nor this user (uid 0)");
    EXPECT_FALSE(OpenControlDir(link + "/control").ok());
  }
  rmdir((real + "/control").c_str());
  unlink(link.c_str());
  rmdir(real.c_str());
}

// "link/" and "link/." must not open the link's target (O_NOFOLLOW alone would), and
// "missing/../x" must not stop the walk of the parents at the missing part.
TEST(ControlDir, TrailingSlashesDotsAndParentsDoNotGetAround) {
  EXPECT_EQ(LexicalControlPath("/a//b/./"), "/a/b");
  EXPECT_EQ(LexicalControlPath("/a/b/."), "/a/b");
  EXPECT_EQ(LexicalControlPath("a/b/"), "./a/b");
  EXPECT_EQ(LexicalControlPath("/"), "/");
  const std::string real = Scratch();
  const std::string link = real + "-link";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  for (const char* tail : {"/", "/.", "//", "/./"}) {
    auto opened = OpenControlDir(link + tail);
    ASSERT_FALSE(opened.ok()) << tail;
    EXPECT_EQ(opened.error().code, ELOOP) << tail;
    EXPECT_FALSE(MakeControlDir(link + tail + "/").ok()) << tail;
  }
  const std::string open_parent = Scratch();
  ASSERT_EQ(chmod(open_parent.c_str(), 0777), 0);
  const std::string sneaky = real + "/missing/.." + open_parent.substr(open_parent.rfind('/')) +
                             "/../" + open_parent.substr(open_parent.rfind('/') + 1) + "/ctl";
  for (const std::string& dir : {sneaky, real + "/missing/../ctl"}) {
    auto made = MakeControlDir(dir);
    ASSERT_FALSE(made.ok()) << dir;
    EXPECT_EQ(made.error().code, EINVAL) << dir;
    EXPECT_THAT(made.error().message, HasSubstr("names a parent with '..': refused")) << dir;
    EXPECT_THAT(UnsafeControlDir(dir), HasSubstr("names a parent with '..'")) << dir;
  }
  struct stat st;
  EXPECT_NE(stat((real + "/missing").c_str(), &st), 0);  // nothing was created
  unlink(link.c_str());
  rmdir(real.c_str());
  rmdir(open_parent.c_str());
}

TEST(ControlDir, AParentOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string parent = Scratch();
  const std::string dir = parent + "/control";
  ASSERT_TRUE(MakeControlDir(dir).ok());
  ASSERT_EQ(chown(parent.c_str(), 65534, 65534), 0);
  auto opened = OpenControlDir(dir);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message,
              HasSubstr("its parent " + parent + " is owned by uid 65534, neither root nor this "
                        "user (uid 0)"));
  rmdir(dir.c_str());
  rmdir(parent.c_str());
}

TEST(Socket, ListenerIsCreated0600EvenUnderAnEmptyUmask) {
  const std::string dir = Scratch();
  const std::string path = dir + "/x.sock";
  const mode_t old = umask(0);
  auto listener = ListenSeqpacket(path, 4);
  umask(old);
  ASSERT_TRUE(listener.ok()) << listener.error().message;
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST(Socket, PeerOfAnotherUserOrAnotherPidIsRefused) {
  const ucred stranger{4242, 1001, 1001};
  EXPECT_EQ(PeerProblem(stranger, 1000, 0),
            "peer pid 4242 runs as uid 1001, not 1000 or root: refused");
  EXPECT_EQ(PeerProblem(ucred{4242, 0, 0}, 1000, 0), "");  // root may talk to anyone
  EXPECT_EQ(PeerProblem(ucred{4242, 1000, 1000}, 1000, 4242), "");
  EXPECT_EQ(PeerProblem(ucred{4243, 1000, 1000}, 1000, 4242),
            "the endpoint of pid 4242 is answered by pid 4243 (uid 1000): refused");
  EXPECT_EQ(EndpointPidOfPath("/run/x/4242.sock"), 4242);
  EXPECT_EQ(EndpointPidOfPath("/run/x/silent.sock"), 0);
  EXPECT_EQ(EndpointPidOfPath("4242.sock.old"), 0);
}

// A client of "<pid>.sock" refuses a listener that is not that pid, before sending anything.
TEST(EndpointClient, AFakeEndpointIsRefusedBeforeTheRequestIsSent) {
  const std::string dir = Scratch();
  const int other = getpid() == 1 ? 2 : 1;  // pid 1 exists and is not this process
  const std::string path = EndpointPath(dir, other);
  auto listener = ListenSeqpacket(path, 4);
  ASSERT_TRUE(listener.ok());
  auto reply = Request(path, proto::IdentifyRequest{}.Encode(), 2000);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, EPERM);
  EXPECT_THAT(reply.error().message,
              HasSubstr("the endpoint of pid " + std::to_string(other) + " is answered by pid " +
                        std::to_string(getpid())));
  auto conn = AcceptConnection(listener->get(), Deadline::AfterMs(1000));
  ASSERT_TRUE(conn.ok());
  char byte;
  int fd = -1;
  auto got = RecvPacket(conn->get(), &byte, 1, &fd, Deadline::AfterMs(1000));
  ASSERT_FALSE(got.ok());  // closed unsent
  EXPECT_EQ(got.error().code, ECONNRESET);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

// A client refuses an endpoint in a directory it cannot trust: nothing connects.
TEST(EndpointClient, AnEndpointInAnOpenDirectoryIsNotContacted) {
  const std::string dir = Scratch();
  const std::string path = EndpointPath(dir, getpid());
  auto listener = ListenSeqpacket(path, 4);
  ASSERT_TRUE(listener.ok());
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  auto reply = Request(path, proto::IdentifyRequest{}.Encode(), 2000);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().code, EPERM);
  EXPECT_THAT(reply.error().message, HasSubstr("is unsafe: its mode is 0755, not 0700"));
  EXPECT_EQ(AcceptConnection(listener->get(), Deadline::AfterMs(100)).error().code, ETIMEDOUT);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace cusnap
