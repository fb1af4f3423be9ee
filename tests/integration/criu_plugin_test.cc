// libcusnap_criu.so as CRIU loads it (src/criu_plugin): a plain `criu dump` and `criu restore`
// of a two-process tree with the plugin's folder as CRIU's plugin directory (-L). CRIU's log
// shows the plugin loaded and each of its hooks called for each process, at the point of the
// dump and the restore the plugin's design stands on (docs/CONTAINERS.md, "How CRIU drives a
// device plugin"). CRIU comes from scripts/fetch_criu.sh (or CUSNAP_CRIU, or PATH); this test
// is built only with the plugin, which is built only where CRIU's plugin header is, so a CRIU
// that cannot run fails it: it never skips.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "criu_problem.h"

namespace cusnap::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The first pid in /proc/<pid>/task/<pid>/children, or -1 when it has none yet.
pid_t FirstChild(pid_t pid) {
  const std::string p = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children";
  pid_t child = -1;
  std::ifstream(p) >> child;
  return child;
}

/// /proc/<pid>/comm without its newline.
std::string Comm(pid_t pid) {
  std::string comm;
  std::getline(std::ifstream("/proc/" + std::to_string(pid) + "/comm"), comm);
  return comm;
}

class CriuPlugin : public OwnMachineTest {
 protected:
  CriuPlugin() : OwnMachineTest("criu-plugin") {}

  void SetUp() override {
    OwnMachineTest::SetUp();
    // The restored tree's root is criu's child until criu (restore -d) exits; it then comes
    // to this process, which reaps it.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    KeepInheritedDescriptorsFromChildren();
    ASSERT_EQ(CriuProblem(), "") << "CRIU must run here (scripts/fetch_criu.sh)";
    criu_ = *coord::FindCriu();
    plugin_dir_ = Env("CUSNAP_TEST_CRIU_PLUGIN_DIR");
    ASSERT_FALSE(plugin_dir_.empty());
    std::filesystem::create_directory(dir_ + "/images");
  }

  void TearDown() override {
    // The root first: its child then comes to this process (the subreaper), which reaps it.
    for (const pid_t pid : {root_, grandchild_}) {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
    OwnMachineTest::TearDown();
  }

  /// Starts `sleep` with a `sleep` child, in a session of its own (CRIU dumps a session
  /// leader without --shell-job), and waits until both run `sleep`.
  void StartTree() {
    root_ = ::fork();
    ASSERT_GE(root_, 0);
    if (root_ == 0) {
      ::setsid();
      const int null = ::open("/dev/null", O_RDWR);
      for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
      ::execl("/bin/sh", "sh", "-c", "sleep 1000 & exec sleep 1000", nullptr);
      ::_exit(127);
    }
    // Until the shell has forked its child and replaced itself with `sleep`: a condition,
    // not a time.
    while (Comm(root_) != "sleep" || (grandchild_ = FirstChild(root_)) < 0 || Comm(grandchild_) != "sleep") {
      ASSERT_NE(ProcState(root_), 'Z') << "the tree's shell exited";
      ::usleep(1000);
    }
  }

  /// criu <action> on the images folder with the plugin's folder as CRIU's plugin directory,
  /// CRIU's log at -v4 in images/<action>.log.
  Ran Criu(const std::string& action, const std::string& args) {
    return RunCommand(criu_ + " " + action + " -D " + dir_ + "/images -L " + plugin_dir_ +
                          " -v4 -o " + action + ".log " + args,
                      dir_);
  }

  std::string Log(const std::string& action) { return ReadFile(dir_ + "/images/" + action + ".log"); }

  std::string criu_, plugin_dir_;
  pid_t root_ = -1, grandchild_ = -1;
};

/// Where `needle` starts in `log`, failing the test when it is not there.
size_t At(const std::string& log, const std::string& needle) {
  const size_t at = log.find(needle);
  EXPECT_NE(at, std::string::npos) << "CRIU's log lacks \"" << needle << "\"";
  return at;
}

TEST_F(CriuPlugin, CriuLoadsItAndCallsEachHookForEachProcessOnDumpAndRestore) {
  ASSERT_NO_FATAL_FAILURE(StartTree());
  const std::string root = std::to_string(root_), grandchild = std::to_string(grandchild_);

  const Ran dump = Criu("dump", "-t " + root);
  ASSERT_EQ(dump.status, 0) << dump.err << Log("dump");
  // CRIU killed the tree after the dump: reap both, so their pids are free for the restore.
  ASSERT_EQ(::waitpid(root_, nullptr, 0), root_);
  ASSERT_EQ(::waitpid(grandchild_, nullptr, 0), grandchild_);
  const std::string dumped = Log("dump");
  At(dumped, "Plugin \"cusnap_criu\"");
  const size_t init = At(dumped, "cusnap_criu: init dump");
  const size_t pause_root = At(dumped, "cusnap_criu: PAUSE_DEVICES pid " + root + "\n");
  const size_t pause_child = At(dumped, "cusnap_criu: PAUSE_DEVICES pid " + grandchild + "\n");
  const size_t checkpoint_root = At(dumped, "cusnap_criu: CHECKPOINT_DEVICES pid " + root + "\n");
  const size_t checkpoint_child = At(dumped, "cusnap_criu: CHECKPOINT_DEVICES pid " + grandchild + "\n");
  const size_t inventory = At(dumped, "Writing image inventory");
  const size_t exit = At(dumped, "cusnap_criu: exit dump ret 0");
  // The order the plugin's design stands on: each process is paused before CRIU seizes it
  // (the root while the whole tree still runs), devices are checkpointed once every process
  // is seized and before CRIU writes any image of it, and exit comes after the inventory.
  EXPECT_LT(init, pause_root);
  EXPECT_LT(pause_root, At(dumped, "Seized task " + root + ","));
  EXPECT_LT(pause_child, At(dumped, "Seized task " + grandchild + ","));
  EXPECT_LT(std::max(pause_root, pause_child), std::min(checkpoint_root, checkpoint_child));
  EXPECT_LT(std::max(checkpoint_root, checkpoint_child), At(dumped, "Dumping task (pid: " + root + " "));
  EXPECT_LT(inventory, exit);

  const Ran restore = Criu("restore", "-d --pidfile " + dir_ + "/restored.pid");
  ASSERT_EQ(restore.status, 0) << restore.err << Log("restore");
  const std::string restored = Log("restore");
  At(restored, "cusnap_criu: init restore (the images do not name this plugin)");
  const size_t forking = At(restored, "cusnap_criu: POST_FORKING\n");
  const size_t resume_root = At(restored, "cusnap_criu: RESUME_DEVICES_LATE pid " + root + "\n");
  const size_t resume_child = At(restored, "cusnap_criu: RESUME_DEVICES_LATE pid " + grandchild + "\n");
  const size_t resumed = At(restored, "Restore finished successfully. Tasks resumed.");
  EXPECT_LT(forking, std::min(resume_root, resume_child));
  EXPECT_LT(std::max(resume_root, resume_child), resumed);
  At(restored, "cusnap_criu: exit restore ret 0");

  // The same tree runs again, under the same pids.
  EXPECT_EQ(ReadFile(dir_ + "/restored.pid"), root);
  EXPECT_EQ(Comm(root_), "sleep");
  EXPECT_EQ(FirstChild(root_), grandchild_);
}

}  // namespace
}  // namespace cusnap::testing
