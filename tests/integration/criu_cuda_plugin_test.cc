// CRIU's own CUDA plugin (plugins/cuda of CRIU's tree, built by scripts/fetch_criu.sh into
// .criu/plugins/cuda_plugin.so) installed beside libcusnap_criu.so, as on a GPU machine where
// both are in CRIU's plugin directory: a plain `criu dump` / `criu restore` of criu_job. The
// CUDA plugin runs `cuda-checkpoint` (here cuda_checkpoint_standin, over the simulated
// driver's checkpoint API, first on CRIU's PATH) and is enabled without a GPU by CRIU's fault
// injection 138 (FI_PLUGIN_CUDA_FORCE_ENABLE). It must change nothing: its log shows it asked
// each participant (its restore thread, then its state, which the simulated driver answers
// while CRIU holds the process seized, as the real driver does) and found it checkpointed by
// cusnap; every byte comes back. Fails, never skips, when the CUDA plugin or the stand-in is
// missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_runner.h"
#include "criu_job_harness.h"
#include "criu_plugin_fixture.h"

namespace cusnap::testing {
namespace {

using ::testing::HasSubstr;

class CriuCudaPlugin : public CriuPlugin {
 protected:
  void SetUp() override {
    CriuPlugin::SetUp();
    if (HasFatalFailure()) return;
    namespace fs = std::filesystem;
    const fs::path criu = fs::canonical(criu_);
    const std::string cuda_plugin = (criu.parent_path().parent_path() / "plugins/cuda_plugin.so").string();
    ASSERT_TRUE(fs::exists(cuda_plugin)) << cuda_plugin << " is missing: scripts/fetch_criu.sh builds it";
    const std::string standin = Env("CUSNAP_TEST_BIN_DIR") + "/cuda-checkpoint-standin";
    ASSERT_TRUE(fs::exists(standin + "/cuda-checkpoint")) << standin << "/cuda-checkpoint is missing";
    // One plugin directory holding both, as CRIU's own would.
    const std::string both = dir_ + "/plugins";
    fs::create_directory(both);
    fs::create_symlink(plugin_dir_ + "/libcusnap_criu.so", both + "/libcusnap_criu.so");
    fs::create_symlink(cuda_plugin, both + "/cuda_plugin.so");
    plugin_dir_ = both;
    ::setenv("PATH", (standin + ":" + Env("PATH")).c_str(), 1);
    ::setenv("CRIU_FAULT", "138", 1);
  }

  void TearDown() override {
    ::unsetenv("CRIU_FAULT");
    CriuPlugin::TearDown();
  }
};

TEST_F(CriuCudaPlugin, FindsEveryParticipantCheckpointedAndChangesNothing) {
  SKIP_UNLESS_CRIU_ROUND_TRIPS();
  ASSERT_NO_FATAL_FAILURE(StartJob());
  const Ran dump = Dump("images");
  ASSERT_EQ(dump.status, 0) << dump.err << Log("images", "dump");
  const std::string dumped = Log("images", "dump");
  EXPECT_THAT(dumped, HasSubstr("cuda_plugin: initialized: cuda_plugin stage 0"));
  EXPECT_THAT(dumped, HasSubstr("cusnap_criu: cusnap: hand_over_to_criu "));
  for (const int pid : tree_) {
    EXPECT_THAT(dumped, HasSubstr("cuda_plugin: pid " + std::to_string(pid) +
                                  " already in a checkpointed state"));
  }
  ASSERT_NO_FATAL_FAILURE(AwaitJobGone());
  const Ran restore = Restore("images");
  ASSERT_EQ(restore.status, 0) << restore.err << Log("images", "restore");
  const std::string restored = Log("images", "restore");
  // The images name both plugins: the CUDA plugin is enabled on restore too, and sees no
  // participant (cusnap's RESUME_DEVICES_LATE answers for them, CRIU calling it first).
  EXPECT_THAT(restored, HasSubstr("cuda_plugin: initialized: cuda_plugin stage 2"));
  EXPECT_LT(restored.find("Plugin \"cusnap_criu\""), restored.find("Plugin \"cuda_plugin\""))
      << "CRIU loaded the CUDA plugin first (readdir order of the plugin directory): it would "
         "restore and unlock the participants natively before cusnap restores them";
  EXPECT_THAT(restored, HasSubstr("cusnap_criu: cusnap: activate "));
  ExpectEveryByteOnceTold(job_dir_, log_);
}

}  // namespace
}  // namespace cusnap::testing
