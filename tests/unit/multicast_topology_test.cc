// The coordinator's multicast team rules (src/coordinator/record/topology.h) over INSPECT records
// written the way the shim's multicast table reports them: a complete two-process team
// passes; a partial team, inconsistent properties, an unbound device, a bind past every
// extent, a second creator and a bound member the process no longer holds are each refused
// with a message naming the object and the processes. Binds past the requested size pass
// when a participant's driver accepted that extent (capacity rounding).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/record/topology.h"
#include "coordinator_fixtures.h"

namespace cusnap::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const proto::ObjectId kObject = Id(100, kStart100, 1);

proto::Record Object(bool creator, uint64_t extent = kMiB2) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kMulticast);
  r.flags = (creator ? proto::kCreator : 0u) | proto::kHandleLive | proto::kShared;
  r.id = kObject;
  r.object_size = kMiB2;
  r.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  r.handle_count = 1;
  r.num_devices = 2;
  r.extent = extent;
  return r;
}

proto::Record Device(int device) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastDevice);
  r.id = kObject;
  r.num_devices = 2;
  r.object_size = kMiB2;
  r.device = device;
  return r;
}

proto::Record Binding(int device, uint64_t offset = 0, uint64_t size = kMiB2) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastBinding);
  r.id = kObject;
  r.device = device;
  r.offset = offset;
  r.size = size;
  r.bind_kind = 2;  // BindAddr
  r.bind_api = 1;
  r.address = 0x7e0000000000;
  return r;
}

/// pid 100 creates the object and binds device 0; pid 200 imports it and binds device 1.
std::vector<coord::ParticipantView> Team() {
  coord::ParticipantView p100{100, kStart100, 0, {Object(true), Device(0), Binding(0)}};
  coord::ParticipantView p200{200, kStart200, 0, {Object(false), Device(1), Binding(1)}};
  return {p100, p200};
}

TEST(MulticastTopology, ACompleteTeamPasses) { EXPECT_TRUE(coord::ValidateTopology(Team()).empty()); }

TEST(MulticastTopology, APartialTeamIsRefusedNamingTheObjectAndTheProcesses) {
  auto job = Team();
  job.pop_back();  // pid 200 is not a participant
  EXPECT_THAT(coord::ValidateTopology(job),
              ElementsAre("multicast object 1 of pid 100 is a partial team: its 2 devices were "
                          "not all added by participants (added: pid 100 device 0; members "
                          "checkpointed: pid 100). Another process of the team is not a "
                          "participant (started without cusnap, or outside the checkpointed "
                          "tree); checkpoint every member of the team together"));
}

TEST(MulticastTopology, DevicesAreCountedPerProcess) {
  // Both ranks use their device 0 (each sees one GPU): two distinct adds.
  auto job = Team();
  job[1].records = {Object(false), Device(0), Binding(0)};
  EXPECT_TRUE(coord::ValidateTopology(job).empty());
}

TEST(MulticastTopology, MembersMustAgreeOnTheProperties) {
  auto job = Team();
  job[1].records[0].object_size = 2 * kMiB2;
  EXPECT_THAT(coord::ValidateTopology(job),
              ElementsAre("multicast object 1 of pid 100: pid 100 reports size 2097152, 2 devices, "
                          "handle types 1, flags 0, but pid 200 reports size 4194304, 2 devices, "
                          "handle types 1, flags 0; every member must agree"));
}

TEST(MulticastTopology, EveryAddedDeviceMustBeBound) {
  auto job = Team();
  job[1].records.pop_back();
  EXPECT_THAT(coord::ValidateTopology(job),
              ElementsAre("pid 200: device 1 of multicast object 1 of pid 100 was added but "
                          "nothing is bound for it; a checkpoint needs every device of a team "
                          "bound"));
}

TEST(MulticastTopology, BindsPastTheRequestedSizePassWithinTheAcceptedExtent) {
  auto job = Team();
  // The driver rounded capacity up: pid 100 bound at 4 MiB and reports that extent.
  job[0].records[0].extent = 3 * kMiB2;
  job[0].records[2] = Binding(0, 2 * kMiB2);
  job[1].records[2] = Binding(1, 2 * kMiB2);
  EXPECT_TRUE(coord::ValidateTopology(job).empty());
  // Past every extent any participant's driver accepted: refused.
  job[1].records[2] = Binding(1, 3 * kMiB2);
  EXPECT_THAT(coord::ValidateTopology(job),
              ElementsAre("pid 200: binding of device 1 at offset 6291456 of multicast object 1 "
                          "of pid 100 (2097152 bytes) lies outside the object's extent (6291456 "
                          "bytes)"));
}

TEST(MulticastTopology, ASecondCreatorIsRefused) {
  auto job = Team();
  job[1].records[0].flags |= proto::kCreator;
  const auto problems = coord::ValidateTopology(job);
  ASSERT_FALSE(problems.empty());
  EXPECT_THAT(problems.back(), HasSubstr("multicast object 1 of pid 100 is reported as created by "
                                         "pid 100 and pid 200; exactly one creator"));
}

TEST(MulticastTopology, ACreatorThatDroppedTheObjectIsNamed) {
  auto job = Team();
  job[0].records = {};  // pid 100 released its handle and unmapped: it reports nothing
  const auto problems = coord::ValidateTopology(job);
  ASSERT_FALSE(problems.empty());
  EXPECT_EQ(problems[0], "pid 100: multicast object 1 of pid 100 is still used by pid 200, but "
                         "its creator released every handle and mapping of it; keep a handle or "
                         "a mapping in the creator while others use it");
}

TEST(MulticastTopology, ABoundMemberMustStillBeHeld) {
  auto job = Team();
  proto::Record mem = Binding(1);
  mem.bind_kind = 1;  // BindMem of allocation 4 of pid 200, which pid 200 does not report
  mem.address = 0;
  mem.member = Id(200, kStart200, 4);
  job[1].records[2] = mem;
  EXPECT_THAT(coord::ValidateTopology(job),
              ElementsAre("pid 200: binding of device 1 at offset 0 of multicast object 1 of pid "
                          "100 binds allocation 4 of pid 200, which this process no longer holds; "
                          "keep a handle of every bound member"));
  job[1].records.push_back(Allocation(Id(200, kStart200, 4), kMiB2, /*creator=*/true));
  EXPECT_TRUE(coord::ValidateTopology(job).empty());
}

}  // namespace
}  // namespace cusnap::testing
