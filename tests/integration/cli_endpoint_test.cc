// Every process under the shim gets an endpoint at its first driver call, whatever entry point
// that is (a process that only uses cuMemAlloc and legacy IPC is not "a CUDA process without
// a cusnap endpoint"). A child forked by a non-CUDA parent under `cusnap run`
// makes one driver call that is not cuInit; its endpoint must then exist.
#include <cuda.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli_runner.h"

namespace {

class CliEndpointTest : public cusnap::testing::OwnMachineTest {
 protected:
  CliEndpointTest() : OwnMachineTest("endpoint-test") {}

  // Starts the job with `call`, returns the child's pid from its "called" line; `status` gets
  // the CUresult of its one call.
  int StartJob(const std::string& call, int* result) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return -1;
    const std::string bin = cusnap::testing::Env("CUSNAP_TEST_BIN_DIR");
    launcher_ = cusnap::testing::Spawn({bin + "/cusnap", "run", "--", bin + "/endpoint_fork_child", call},
                                       {{in[0], 0}, {out[1], 1}});
    ::close(in[0]);
    ::close(out[1]);
    input_ = in[1];
    FILE* lines = ::fdopen(out[0], "r");
    int pid = -1;
    if (lines == nullptr || std::fscanf(lines, "called %d %d", &pid, result) != 2) pid = -1;
    if (lines != nullptr) std::fclose(lines);
    return pid;
  }
  void TearDown() override {
    if (input_ >= 0) ::close(input_);
    int status = 0;
    if (launcher_ > 0) ::waitpid(launcher_, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "job status " << status;
    OwnMachineTest::TearDown();
  }
  bool HasEndpoint(int pid) const {
    struct stat st {};
    return ::stat((dir_ + "/control/" + std::to_string(pid) + ".sock").c_str(), &st) == 0 &&
           S_ISSOCK(st.st_mode);
  }

  pid_t launcher_ = -1;
  int input_ = -1;
};

TEST_F(CliEndpointTest, ForkedChildWhoseFirstCallIsNotCuInitHasAnEndpoint) {
  int result = -1;
  const int child = StartJob("driver-version", &result);
  ASSERT_GT(child, 0);
  EXPECT_EQ(result, CUDA_SUCCESS);
  EXPECT_TRUE(HasEndpoint(child)) << "no endpoint for the forked child " << child;
  EXPECT_TRUE(HasEndpoint(launcher_));
}

TEST_F(CliEndpointTest, ForkedChildWhoseFirstCallIsLegacyIpcHasAnEndpoint) {
  int result = -1;
  const int child = StartJob("ipc-get", &result);
  ASSERT_GT(child, 0);
  EXPECT_EQ(result, CUDA_ERROR_NOT_INITIALIZED);  // no cuInit: the driver's answer, passed through
  EXPECT_TRUE(HasEndpoint(child)) << "no endpoint for the forked child " << child;
}

// The endpoint's threads run (each names itself once running) before the application's main
// does: an application that forks at once must not fork while one of them is inside its
// start, where the thread library and ASan's allocator hold locks the child inherits held
// (criu_job's child deadlocked on its first allocation of that size under ASan).
TEST_F(CliEndpointTest, TheEndpointThreadsRunBeforeTheApplicationsMain) {
  const std::string bin = cusnap::testing::Env("CUSNAP_TEST_BIN_DIR");
  for (int run = 0; run < 5; ++run) {
    const cusnap::testing::Ran r = cusnap::testing::RunCommand(
        bin + "/cusnap run -- " + bin + "/endpoint_fork_child threads", dir_);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(" cusnap-peer"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" cusnap-control"), std::string::npos) << r.out;
  }
}

}  // namespace
