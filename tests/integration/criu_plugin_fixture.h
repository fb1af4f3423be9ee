// The fixture of the tests that take criu_job through a plain `criu dump` / `criu restore` with
// libcusnap_criu.so (criu_plugin_test.cc, criu_plugin_faults_test.cc): CRIU found as for the
// images tests, the plugin's folder as CRIU's plugin directory (-L), the job started and
// waited for.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "criu_job_harness.h"
#include "criu_problem.h"
#include "coordinator/images/criu.h"
#include "coordinator/proc/processes.h"

namespace cusnap::testing {

class CriuPlugin : public OwnMachineTest {
 protected:
  CriuPlugin() : OwnMachineTest("criu-plugin") {}

  void SetUp() override {
    OwnMachineTest::SetUp();
    ASSERT_EQ(CriuProblem(), "") << "CRIU must run here (scripts/fetch_criu.sh)";
    criu_ = *coord::FindCriu();
    plugin_dir_ = Env("CUSNAP_TEST_CRIU_PLUGIN_DIR");
    ASSERT_FALSE(plugin_dir_.empty());
    job_dir_ = dir_ + "/job";
    log_ = dir_ + "/job.log";
  }

  void TearDown() override {
    for (const int pid : coord::ProcessTree(root_)) ::kill(pid, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    OwnMachineTest::TearDown();
  }

  /// criu_job started (its root in root_).
  void StartJob() {
    root_ = StartCriuJob(job_dir_, log_);
    ASSERT_GT(root_, 0);
    tree_ = coord::ProcessTree(root_);
  }

  /// criu <action> on <dir_>/<images> with the plugin's folder as CRIU's plugin directory,
  /// CRIU's log at -v4 in <images>/<action>.log; --shell-job: the job's root is no session
  /// leader.
  Ran Criu(const std::string& action, const std::string& images, const std::string& args = "",
           const std::string& plugins = "") {
    std::filesystem::create_directories(dir_ + "/" + images);
    return RunCommand(criu_ + " " + action + " -D " + dir_ + "/" + images + " -L " +
                          (plugins.empty() ? plugin_dir_ : plugins) + " -v4 --shell-job -o " +
                          action + ".log " + args,
                      dir_);
  }

  Ran Dump(const std::string& images, const std::string& args = "") {
    return Criu("dump", images, "-t " + std::to_string(root_) + " " + args);
  }

  Ran Restore(const std::string& images) {
    ::unlink((dir_ + "/restored.pid").c_str());
    return Criu("restore", images, "-d --pidfile " + dir_ + "/restored.pid");
  }

  std::string Log(const std::string& images, const std::string& action) {
    return ReadAll(dir_ + "/" + images + "/" + action + ".log");
  }

  /// Waits until every process of the job (as StartJob found it) is gone and reaped: CRIU
  /// kills them after a dump, and their pids must be free for the restore.
  void AwaitJobGone() {
    const auto gone = [&] {
      for (const int pid : tree_) {
        if (::kill(pid, 0) == 0) return false;
      }
      return true;
    };
    for (int i = 0; i < 2000 && !gone(); ++i) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      ::usleep(5'000);
    }
    ASSERT_TRUE(gone()) << "the job's processes are still there";
  }

  /// A `criu dump` of the job into <dir_>/<images> that succeeds; returns once the job's
  /// processes are gone.
  void DumpAndAwaitGone(const std::string& images) {
    const Ran dump = Dump(images);
    ASSERT_EQ(dump.status, 0) << dump.err << Log(images, "dump");
    AwaitJobGone();
  }

  /// A `criu restore` of <dir_>/<images> that succeeds, then every byte read back by the job.
  void RestoreWithEveryByte(const std::string& images) {
    const Ran restore = Restore(images);
    ASSERT_EQ(restore.status, 0) << restore.err << Log(images, "restore");
    ExpectEveryByteOnceTold(job_dir_, log_);
  }

  /// `cusnap status --pid root_` until both participants are active (AwaitBothActive).
  void AwaitActive() {
    AwaitBothActive([&] { return Cusnap({"status", "--pid", std::to_string(root_)}); });
  }

  std::string criu_, plugin_dir_, job_dir_, log_;
  pid_t root_ = -1;
  std::vector<int> tree_;  // the job's processes (StartJob)
};

}  // namespace cusnap::testing
