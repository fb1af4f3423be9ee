// Topology validation (coordinator/record/topology.h): every rule, positive and negative, with the
// exact message users read.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/record/topology.h"
#include "unit/coordinator_fixtures.h"

namespace cusnap::testing {
namespace {

using coord::ValidateTopology;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CoordinatorTopology, ValidJobPasses) {
  EXPECT_TRUE(ValidateTopology(ValidJob()).empty());
}

TEST(CoordinatorTopology, EmptyJobPasses) {
  EXPECT_TRUE(ValidateTopology({}).empty());
}

TEST(CoordinatorTopology, CreatorAndImporterBothWaysPass) {
  auto job = ValidJob();
  const auto a2 = Id(200, kStart200, 1);
  job[1].records.push_back(Allocation(a2, 2 * kMiB2, true));
  job[0].records.push_back(Mapping(a2, 0x7d0000000000, kMiB2, kMiB2, false));  // second half
  job[0].records.push_back(Mapping(a2, 0x7c0000000000, kMiB2, 0, false));      // second VA
  EXPECT_TRUE(ValidateTopology(job).empty());
}

/// An importer as the creator's INSPECT reports it.
proto::Importer ImporterOf(const proto::ObjectId& id, int pid, uint64_t start,
                           uint32_t kind = 1) {
  proto::Importer importer{};
  importer.id = id;
  importer.kind = kind;
  importer.pid = pid;
  importer.start_time = start;
  return importer;
}

constexpr char kNotAParticipant[] =
    " and is still running, but is not a participant of this checkpoint; checkpoint every "
    "process that shares memory together (the job's root with --pid, or --all)";

TEST(CoordinatorTopology, ImportersThatParticipatePass) {
  auto job = ValidJob();
  job[0].importers = {ImporterOf(Id(100, kStart100, 1), 200, kStart200)};
  EXPECT_TRUE(ValidateTopology(job).empty());
}

// The closed participant set: a live importer outside the participants is named once, with
// what it imported (an importer whose pid now has another start time is another process).
TEST(CoordinatorTopology, ImporterOutsideTheParticipantsIsRefused) {
  auto job = ValidJob();
  job[0].records.push_back(Allocation(Id(100, kStart100, 2), kMiB2, true));
  job[0].importers = {ImporterOf(Id(100, kStart100, 1), 200, kStart200),
                      ImporterOf(Id(100, kStart100, 1), 300, 7),
                      ImporterOf(Id(100, kStart100, 2), 300, 7),
                      ImporterOf(Id(100, kStart100, 3), 200, kStart200 + 1, 2)};
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre(std::string("pid 200 imported multicast object 3 of pid 100") +
                              kNotAParticipant,
                          std::string("pid 300 imported allocation 1 of pid 100 (and 1 more)") +
                              kNotAParticipant));
}

TEST(CoordinatorTopology, OneUntrackedImportIsRefused) {
  auto job = ValidJob();
  job[1].untracked_imports = 1;
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: 1 allocation is imported from a descriptor that is not a "
                          "cusnap ticket; release it or export it through a process started "
                          "with 'cusnap run'"));
}

TEST(CoordinatorTopology, SeveralUntrackedImportsAreRefused) {
  auto job = ValidJob();
  job[0].untracked_imports = 3;
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 100: 3 allocations are imported from descriptors that are not "
                          "cusnap tickets; release them or export them through a process "
                          "started with 'cusnap run'"));
}

/// An untracked import record as a shim's IDENTIFY reports it: real handle `real`, mapped
/// at [address, address+size) `offset` bytes in (address 0: not mapped).
proto::Record Untracked(uint64_t real, uint64_t address, uint64_t size, uint64_t offset,
                        CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE, int id = 0,
                        uint32_t handle_type = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
  proto::Record r{};
  r.kind = static_cast<uint32_t>(proto::RecordKind::kUntrackedImport);
  r.flags = proto::kShared | proto::kHandleLive;
  r.id.local_id = real;
  r.address = address;
  r.size = size;
  r.offset = offset;
  r.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
  r.location_type = type;
  r.location_id = id;
  r.handle_types = handle_type;
  r.handle_count = 1;
  return r;
}

constexpr char kNotATicket[] =
    "was imported from a descriptor that is not a cusnap ticket (fd import outside cusnap); "
    "release it, or export it from a process started with 'cusnap run'";

TEST(CoordinatorTopology, UntrackedImportIsNamedByLocationAndRange) {
  auto job = ValidJob();
  job[1].untracked_imports = 1;
  job[1].untracked = {Untracked(0x51, 0x7f0000000000, kMiB2, 0)};
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre(std::string("pid 200: an allocation of at least 2097152 bytes on "
                                      "device 0, mapped at 0x7f0000000000-0x7f0000200000, ") +
                          kNotATicket));
}

TEST(CoordinatorTopology, UntrackedImportsMappedTwiceAndNotMappedAreNamedOneLineEach) {
  auto job = ValidJob();
  job[0].untracked_imports = 2;
  job[0].untracked = {
      Untracked(0x51, 0x7f0000000000, kMiB2, 0, CU_MEM_LOCATION_TYPE_DEVICE, 1),
      Untracked(0x51, 0x7f0000400000, kMiB2 / 2, kMiB2 / 2, CU_MEM_LOCATION_TYPE_DEVICE, 1),
      Untracked(0x52, 0, 0, 0, CU_MEM_LOCATION_TYPE_HOST_NUMA, 0),
  };
  EXPECT_THAT(
      ValidateTopology(job),
      ElementsAre(std::string("pid 100: an allocation of at least 2097152 bytes on device 1, "
                              "mapped at 0x7f0000000000-0x7f0000200000 and "
                              "0x7f0000400000-0x7f0000500000 (at offset 1048576), ") +
                      kNotATicket,
                  std::string("pid 100: an allocation on host NUMA node 0, not mapped, ") +
                      kNotATicket));
}

TEST(CoordinatorTopology, UntrackedImportWithoutPropertiesNamesItsSourceHandleType) {
  auto job = ValidJob();
  job[1].untracked_imports = 1;
  job[1].untracked = {Untracked(0x51, 0, 0, 0, CU_MEM_LOCATION_TYPE_INVALID, 0,
                                CU_MEM_HANDLE_TYPE_FABRIC)};
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: an allocation at a location the driver did not report, not "
                          "mapped, was imported from a descriptor that is not a cusnap ticket "
                          "(fabric handle import outside cusnap); release it, or export it from "
                          "a process started with 'cusnap run'"));
}

TEST(CoordinatorTopology, UntrackedImportsBeyondTheReportedOnesAreCounted) {
  auto job = ValidJob();
  job[1].untracked_imports = 11;  // the shim describes the first 8
  for (uint64_t k = 0; k < proto::kMaxUntrackedReported; ++k) {
    job[1].untracked.push_back(Untracked(0x100 + k, 0, 0, 0));
  }
  const auto problems = ValidateTopology(job);
  ASSERT_EQ(problems.size(), proto::kMaxUntrackedReported + 1);
  for (size_t k = 0; k < proto::kMaxUntrackedReported; ++k) {
    EXPECT_EQ(problems[k], std::string("pid 200: an allocation on device 0, not mapped, ") +
                               kNotATicket);
  }
  EXPECT_EQ(problems.back(),
            "pid 200: 3 more allocations are imported from descriptors that are not cusnap "
            "tickets; release them or export them through a process started with 'cusnap run'");
  job[1].untracked_imports = 9;
  EXPECT_EQ(ValidateTopology(job).back(),
            "pid 200: 1 more allocation is imported from a descriptor that is not a cusnap "
            "ticket; release it or export it through a process started with 'cusnap run'");
}

TEST(CoordinatorTopology, TwoCreatorsAreRefused) {
  auto job = ValidJob();
  job[1].records[0].flags |= proto::kCreator;
  // pid 200 also claims creation of pid 100's allocation: the id names another process,
  // and the allocation now has two creators.
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: allocation 1 of pid 100 is reported as created here, but "
                          "its id names another process",
                          "allocation 1 of pid 100 is reported as created by pid 100 and pid "
                          "200; exactly one creator per allocation"));
}

TEST(CoordinatorTopology, MissingCreatorIsRefused) {
  auto job = ValidJob();
  job.erase(job.begin());  // the creator is not a participant
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: allocation 1 of pid 100 is imported, but its creator is not "
                          "a participant; checkpoint every process that shares memory together "
                          "(the job's root with --pid, or --all), each started with 'cusnap run' "
                          "(the creator is pid 100)"));
}

TEST(CoordinatorTopology, CreatorWithoutHandleOrMappingIsRefused) {
  auto job = ValidJob();
  // The creator released its handle and unmapped: its allocation record stays (the importer
  // keeps the memory alive) with no live handle, and no creator mapping is left.
  job[0].records = {Allocation(Id(100, kStart100, 1), kMiB2, true, /*handles=*/0)};
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 100: allocation 1 of pid 100 is still held or mapped by pid 200, "
                          "but its creator released both its handle and its mappings; keep a "
                          "handle or a mapping in the creator while others use it"));
}

TEST(CoordinatorTopology, CreatorWithMappingOnlyIsAnchored) {
  auto job = ValidJob();
  job[0].records[0] = Allocation(Id(100, kStart100, 1), kMiB2, true, /*handles=*/0);
  EXPECT_TRUE(ValidateTopology(job).empty());
}

TEST(CoordinatorTopology, CreatorWithHandleOnlyIsAnchored) {
  auto job = ValidJob();
  job[0].records.pop_back();  // creator unmapped, keeps its handle
  EXPECT_TRUE(ValidateTopology(job).empty());
}

TEST(CoordinatorTopology, MappingPastTheAllocationIsRefused) {
  auto job = ValidJob();
  job[1].records[1].offset = kMiB2 / 2;  // 2 MiB mapped from the middle of a 2 MiB allocation
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: mapping 0x7e0000000000-0x7e0000200000 of allocation 1 of "
                          "pid 100 at offset 1048576 lies outside the allocation (size "
                          "2097152 bytes)"));
}

TEST(CoordinatorTopology, MappingBoundsCheckDoesNotOverflow) {
  auto job = ValidJob();
  job[1].records[1].offset = 4096;
  job[1].records[1].size = UINT64_MAX - 100;  // offset + size wraps around
  const auto problems = ValidateTopology(job);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("lies outside the allocation"));
}

TEST(CoordinatorTopology, MappingExactlyFillingTheAllocationPasses) {
  auto job = ValidJob();
  job[1].records[1].offset = kMiB2 / 2;
  job[1].records[1].size = kMiB2 / 2;
  EXPECT_TRUE(ValidateTopology(job).empty());
}

TEST(CoordinatorTopology, ZeroAddressOrSizeMappingIsRefused) {
  auto job = ValidJob();
  job[1].records[1].address = 0;
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: mapping of allocation 1 of pid 100 has address 0x0 and size "
                          "2097152 (both must be nonzero)"));
}

TEST(CoordinatorTopology, TooManyAccessDescriptorsAreRefused) {
  auto job = ValidJob();
  job[1].records[1].access_count = proto::kMaxAccess + 1;
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 200: mapping of allocation 1 of pid 100 at 0x7e0000000000 has 17 "
                          "access descriptors (at most 16)"));
}

TEST(CoordinatorTopology, ZeroSizeAllocationIsRefused) {
  auto job = ValidJob();
  job[0].records[0].object_size = 0;
  job[1].records[1].size = 0;  // keep the mapping check quiet about bounds: report the size
  job[1].records.pop_back();
  job[0].records.pop_back();
  EXPECT_THAT(ValidateTopology(job), ElementsAre("pid 100: allocation 1 of pid 100 has size 0"));
}

TEST(CoordinatorTopology, UnknownRecordKindIsRefused) {
  auto job = ValidJob();
  job[0].records[1].kind = 99;
  EXPECT_THAT(ValidateTopology(job), ElementsAre("pid 100: record 1 has unknown kind 99"));
}

TEST(CoordinatorTopology, MulticastWithOneCreatorPasses) {
  auto job = ValidJob();
  proto::Record mc{};
  mc.kind = static_cast<uint32_t>(proto::RecordKind::kMulticast);
  mc.id = Id(100, kStart100, 9);
  mc.flags = proto::kCreator;
  mc.object_size = 2u << 20;  // a complete one-device team (multicast_topology_test.cc has more)
  mc.num_devices = 1;
  job[0].records.push_back(mc);
  mc.flags = 0;
  job[1].records.push_back(mc);
  proto::Record dev{};
  dev.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastDevice);
  dev.id = mc.id;
  job[1].records.push_back(dev);
  proto::Record bind = dev;
  bind.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastBinding);
  bind.size = 2u << 20;
  bind.bind_kind = 2;
  bind.bind_api = 1;
  bind.address = 0x7f0000000000;
  job[1].records.push_back(bind);
  EXPECT_TRUE(ValidateTopology(job).empty());
}

TEST(CoordinatorTopology, MulticastRulesAreChecked) {
  auto job = ValidJob();
  proto::Record mc{};
  mc.kind = static_cast<uint32_t>(proto::RecordKind::kMulticast);
  mc.id = Id(100, kStart100, 9);
  job[1].records.push_back(mc);  // nobody reports creating it
  proto::Record dev{};
  dev.kind = static_cast<uint32_t>(proto::RecordKind::kMulticastDevice);
  dev.id = Id(100, kStart100, 10);  // an object nobody reports
  job[0].records.push_back(dev);
  EXPECT_THAT(ValidateTopology(job),
              ElementsAre("pid 100: multicast object 9 of pid 100 is still used by pid 200, "
                          "but its creator released every handle and mapping of it; keep a "
                          "handle or a mapping in the creator while others use it",
                          "pid 100: multicast_device record names multicast object 10 of pid "
                          "100, which no participant reports"));
}

}  // namespace
}  // namespace cusnap::testing
