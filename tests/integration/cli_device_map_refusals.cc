// A --device-map that the driver would reject is refused before the restore changes anything
// ("0=1" for a job on GPUs 0 and 1, or "1=0", would otherwise fail after the job was
// changed, exit 4, CUDA_ERROR_INVALID_VALUE). Through the real `cusnap`: exit 5, the
// device the map leaves out named, the job still suspended, and the complete map then works.
#include <gmock/gmock.h>

#include <string>
#include <vector>

#include "job_harness.h"

namespace jobtest {
namespace {

using ::testing::HasSubstr;

class CliDeviceMapRefusal : public JobTest {};

TEST_F(CliDeviceMapRefusal, IncompleteOrManyToOneMapIsRefusedBeforeAnyChange) {
  Worker& creator = Start("creator", 0);
  Worker& importer = Start("importer", 1);
  ASSERT_NO_FATAL_FAILURE(Create(creator, "A", 2, "dev", 0));
  ASSERT_NO_FATAL_FAILURE(Map(creator, "a", "A", 0, 2, "0"));
  ASSERT_NO_FATAL_FAILURE(Fill(creator, "a"));
  ASSERT_NO_FATAL_FAILURE(Share(creator, "A", importer));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "a", "A", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(Create(importer, "B", 2, "dev", 1));
  ASSERT_NO_FATAL_FAILURE(Map(importer, "b", "B", 0, 2, "1"));
  ASSERT_NO_FATAL_FAILURE(Fill(importer, "b"));
  const std::string state = dir_ + "/state";
  const Snapshot before = Suspend(state);
  ASSERT_FALSE(HasFatalFailure());
  // inspect says where each allocation lives in words (not "location 1:0").
  const Ran in = Cusnap({"inspect", state});
  EXPECT_THAT(in.out, HasSubstr("2.00 MiB, created here, in device 0, "));
  EXPECT_THAT(in.out, HasSubstr("2.00 MiB, imported, in device 0, "));
  EXPECT_THAT(in.out, HasSubstr("2.00 MiB, created here, in device 1, "));

  struct Case {
    std::string map, names;
  };
  const std::vector<Case> cases = {
      {"0=1", "it moves device 0 (GPU-"},
      {"1=0", "it moves device 1 (GPU-"},  // and device 0 stays: two on GPU 0
  };
  for (const auto& c : cases) {
    const Ran r = Restore(state, {"--device-map", c.map});
    EXPECT_EQ(r.status, kExitRestoreRefused) << c.map << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.names)) << c.map;
    EXPECT_THAT(r.err, HasSubstr("refused; nothing was changed")) << c.map;
    ASSERT_NO_FATAL_FAILURE(ExpectSuspended()) << c.map;
  }
  const Ran zero_one = Restore(state, {"--device-map", "0=1"});
  EXPECT_THAT(zero_one.err,
              HasSubstr("device map is incomplete: it moves device 0 (GPU-"));
  EXPECT_THAT(zero_one.err, HasSubstr("but does not say where device 1 (GPU-"));
  EXPECT_THAT(zero_one.err, HasSubstr(", which the checkpoint also uses, goes"));
  ASSERT_NO_FATAL_FAILURE(ExpectSuspended());
  ASSERT_NO_FATAL_FAILURE(Resume(state, before, {"--device-map", "0=1,1=0"}, {{0, 1}, {1, 0}}));
}

}  // namespace
}  // namespace jobtest
