// The fault matrix's pause knob (src/cli/test_pause.h) on its own: CUSNAP_TEST_PAUSE_AT stops
// `cusnap checkpoint` at exactly the boundary it names, after that phase's line, and the
// command carries on when continued; a pattern that names no boundary changes nothing.
#include <gmock/gmock.h>
#include <signal.h>

#include <string>
#include <vector>

#include "fault_job.h"

namespace faults {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class PauseKnob : public FaultJob {};

TEST_F(PauseKnob, StopsAtTheNamedBoundaryOnlyAndCarriesOn) {
  ASSERT_NO_FATAL_FAILURE(BuildJob());
  std::vector<std::string> pauses;
  std::string printed_before_pause;
  const jobtest::Ran ck =
      RunPaused("checkpoint", "restore:save:after,checkpoint:save:after", {},
                [&](pid_t cli, const std::string& where) {
                  pauses.push_back(where);
                  ::kill(cli, SIGCONT);
                });
  EXPECT_EQ(ck.status, 0) << ck.out << ck.err;
  EXPECT_THAT(pauses, ElementsAre("save:after"));
  EXPECT_THAT(ck.err, HasSubstr("cusnap-test-pause: checkpoint:save:after\n"));
  // The job came through whole: the pause changed nothing.
  const jobtest::Ran rs = Restore(state_dir_);
  EXPECT_EQ(rs.status, 0) << rs.out << rs.err;
  CheckEveryByte();
}

TEST_F(PauseKnob, APatternNamingNoBoundaryChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(BuildJob());
  bool paused = false;
  const jobtest::Ran ck = RunPaused("checkpoint", "checkpoint:no_such_phase:*", {},
                                    [&](pid_t cli, const std::string&) {
                                      paused = true;
                                      ::kill(cli, SIGCONT);
                                    });
  EXPECT_EQ(ck.status, 0) << ck.out << ck.err;
  EXPECT_FALSE(paused);
  EXPECT_THAT(ck.err, Not(HasSubstr("cusnap-test-pause")));
}

}  // namespace
}  // namespace faults
