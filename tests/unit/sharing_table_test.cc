// The sharing table and the export cache on their own: logical handles, aliasing, the lifetime of an allocation
// (handles + mappings + pins), the VA range index, access merged per device, untracked
// import counting and INSPECT records.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "shim/tables/export_cache.h"
#include "shim/tables/sharing_table.h"
#include "shim_printers.h"

namespace cusnap::shim {
namespace {

constexpr size_t k2MiB = 2u << 20;
const ProcessIdentity kSelf{4242, 777};

CUmemAllocationProp PosixProp(int device = 0) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUmemAccessDesc ReadWrite(int device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

TEST(SharingTable, CreatedAllocationGetsATaggedHandleNamingItsRealHandle) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x1234, k2MiB, PosixProp(), nullptr, kSelf);
  EXPECT_TRUE(IsTagged(h));
  EXPECT_EQ(h & kLogicalCounterMask, 1u);
  auto pinned = table.Pin(h);
  ASSERT_TRUE(pinned);
  EXPECT_TRUE(pinned->creator);
  EXPECT_TRUE(pinned->has_real);
  EXPECT_EQ(pinned->real, 0x1234u);
  EXPECT_EQ(pinned->id.creator_pid, 4242);
  EXPECT_EQ(pinned->id.creator_start, 777u);
  EXPECT_EQ(pinned->id.local_id, 1u);
  EXPECT_FALSE(table.Unpin(pinned->key));  // the handle still references it
  EXPECT_FALSE(table.Knows(kLogicalTag | 99));
  EXPECT_FALSE(table.Pin(kLogicalTag | 99));
}

TEST(SharingTable, RealHandleZeroIsRepresentable) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0, k2MiB, PosixProp(), nullptr, kSelf);
  std::optional<Dropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  ASSERT_TRUE(dropped);
  EXPECT_TRUE(dropped->has_real);
  EXPECT_EQ(dropped->real, 0u);
}

TEST(SharingTable, AliasesShareOneRealHandleReleasedWithTheLast) {
  SharingTable table;
  const uint64_t created = table.AddCreated(0x10, k2MiB, PosixProp(), nullptr, kSelf);
  const proto::ObjectId id = table.Pin(created)->id;
  table.Unpin(table.Pin(created)->key);
  auto alias = table.AliasById(id);
  ASSERT_TRUE(alias);
  EXPECT_NE(*alias, created);
  EXPECT_EQ(table.Pin(*alias)->real, 0x10u);

  std::optional<Dropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(created, &dropped));
  EXPECT_FALSE(dropped);  // the alias still holds it
  EXPECT_FALSE(table.ReleaseHandle(created, &dropped));  // a handle is released once
  EXPECT_EQ(table.Counts().allocations, 1u);
}

TEST(SharingTable, SecondImportOfTheSameAllocationAliasesAndReportsTheDuplicate) {
  SharingTable table;
  const proto::ObjectId id{77, 0, 555, 3};
  bool duplicate = true;
  const uint64_t first = table.AddImported(id, proto::Capability{{1, 2}}, 0x20, k2MiB, PosixProp(), nullptr, &duplicate);
  EXPECT_FALSE(duplicate);
  const uint64_t second = table.AddImported(id, proto::Capability{{1, 2}}, 0x21, k2MiB, PosixProp(), nullptr, &duplicate);
  EXPECT_TRUE(duplicate);
  EXPECT_NE(first, second);
  EXPECT_EQ(table.Pin(second)->real, 0x20u);
  EXPECT_FALSE(table.Pin(first)->creator);
  auto alias = table.AliasById(id);
  ASSERT_TRUE(alias);
  EXPECT_EQ(table.Counts().allocations, 1u);
  auto records = table.Inspect();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].handle_count, 3u);
  EXPECT_EQ(records[0].flags, proto::kHandleLive | proto::kShared);
}

TEST(SharingTable, MappingKeepsTheAllocationAfterItsLastHandle) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x30, 2 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  table.Unpin(key);
  ASSERT_TRUE(table.AddMapping(0x7f0000000000, 2 * k2MiB, 0, key, h));
  std::optional<Dropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  EXPECT_FALSE(dropped);
  // A retain inside the mapping still finds the allocation, under the very handle value
  // the range was mapped with (CUDA Driver API, cuMemRetainAllocationHandle).
  auto retained = table.RetainAt(0x7f0000000000 + k2MiB + 5);
  ASSERT_TRUE(retained);
  EXPECT_EQ(*retained, h);
  EXPECT_EQ(table.Pin(*retained)->real, 0x30u);
  table.Unpin(key);
  ASSERT_TRUE(table.ReleaseHandle(*retained, &dropped));
  EXPECT_FALSE(dropped);
  auto gone = table.RemoveMappings(0x7f0000000000, 2 * k2MiB);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].real, 0x30u);
  EXPECT_TRUE(gone[0].creator);
  EXPECT_EQ(table.Counts().allocations, 0u);
  EXPECT_EQ(table.Counts().mappings, 0u);
}

TEST(SharingTable, EachRetainIsOneMoreReferenceOnTheMappedHandle) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x31, 2 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  table.Unpin(key);
  ASSERT_TRUE(table.AddMapping(0x7f0000000000, 2 * k2MiB, 0, key, h));
  ASSERT_EQ(table.RetainAt(0x7f0000000000), std::optional<uint64_t>(h));
  ASSERT_EQ(table.RetainAt(0x7f0000000000 + k2MiB), std::optional<uint64_t>(h));
  EXPECT_EQ(table.Inspect()[0].handle_count, 3u);
  std::optional<Dropped> dropped;
  // Three references, three releases; a fourth is an unknown handle.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
    EXPECT_FALSE(dropped);
  }
  EXPECT_FALSE(table.Knows(h));
  EXPECT_FALSE(table.ReleaseHandle(h, &dropped));
  EXPECT_EQ(table.Counts().allocations, 1u);  // the mapping keeps it
}

TEST(SharingTable, PinKeepsTheAllocationUntilUnpinned) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x40, k2MiB, PosixProp(), nullptr, kSelf);
  auto pinned = table.Pin(h);
  std::optional<Dropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  EXPECT_FALSE(dropped);
  auto last = table.Unpin(pinned->key);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->real, 0x40u);
}

TEST(SharingTable, RangeIndexFindsTheMappingContainingAnAddress) {
  SharingTable table;
  const CUdeviceptr base = 0x7e0000000000;
  std::vector<AllocationKey> keys;
  for (int i = 0; i < 300; ++i) {
    const uint64_t h = table.AddCreated(0x1000 + static_cast<uint64_t>(i), k2MiB, PosixProp(),
                                        nullptr, kSelf);
    const AllocationKey key = table.Pin(h)->key;
    table.Unpin(key);
    // Every other 2 MiB slot is left unmapped.
    ASSERT_TRUE(table.AddMapping(base + static_cast<CUdeviceptr>(i) * 2 * k2MiB, k2MiB, 0, key, h));
  }
  for (int i = 0; i < 300; i += 37) {
    const CUdeviceptr start = base + static_cast<CUdeviceptr>(i) * 2 * k2MiB;
    auto first_byte = table.RetainAt(start);
    auto last_byte = table.RetainAt(start + k2MiB - 1);
    ASSERT_TRUE(first_byte);
    ASSERT_TRUE(last_byte);
    EXPECT_EQ(table.Pin(*first_byte)->real, 0x1000u + static_cast<uint64_t>(i));
    EXPECT_EQ(table.Pin(*last_byte)->real, 0x1000u + static_cast<uint64_t>(i));
    EXPECT_FALSE(table.RetainAt(start + k2MiB));  // the gap after it
  }
  EXPECT_FALSE(table.RetainAt(base - 1));
  EXPECT_EQ(table.Counts().mappings, 300u);
}

TEST(SharingTable, OverlappingMappingIsRefused) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x50, 2 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  ASSERT_TRUE(table.AddMapping(0x10000000, 2 * k2MiB, 0, key, h));
  EXPECT_FALSE(table.AddMapping(0x10000000 + k2MiB, 2 * k2MiB, 0, key, h));
  EXPECT_FALSE(table.AddMapping(0x10000000 - k2MiB, 2 * k2MiB, 0, key, h));
  EXPECT_TRUE(table.AddMapping(0x10000000 + 2 * k2MiB, k2MiB, 0, key, h));
  EXPECT_EQ(table.Counts().mappings, 2u);
}

TEST(SharingTable, ClassifyTellsCoveringFromPartialRanges) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x60, 4 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  const CUdeviceptr a = 0x20000000;
  ASSERT_TRUE(table.AddMapping(a, 2 * k2MiB, 0, key, h));
  ASSERT_TRUE(table.AddMapping(a + 2 * k2MiB, 2 * k2MiB, 2 * k2MiB, key, h));
  EXPECT_EQ(table.Classify(a, 2 * k2MiB), RangeMatch::kCovers);
  EXPECT_EQ(table.Classify(a, 4 * k2MiB), RangeMatch::kCovers);
  EXPECT_EQ(table.Classify(a - k2MiB, 6 * k2MiB), RangeMatch::kCovers);
  EXPECT_EQ(table.Classify(a, k2MiB), RangeMatch::kPartial);
  EXPECT_EQ(table.Classify(a + k2MiB, 2 * k2MiB), RangeMatch::kPartial);
  EXPECT_EQ(table.Classify(a + 3 * k2MiB, 4 * k2MiB), RangeMatch::kPartial);
  EXPECT_EQ(table.Classify(a + 4 * k2MiB, k2MiB), RangeMatch::kNone);
  EXPECT_EQ(table.Classify(a - k2MiB, k2MiB), RangeMatch::kNone);
}

TEST(SharingTable, AccessIsMergedPerDeviceForEveryCoveredMapping) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x70, 2 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  const CUdeviceptr a = 0x30000000;
  ASSERT_TRUE(table.AddMapping(a, k2MiB, 0, key, h));
  ASSERT_TRUE(table.AddMapping(a + k2MiB, k2MiB, k2MiB, key, h));
  // PyTorch grants one device per call, over the whole range.
  const CUmemAccessDesc dev0 = ReadWrite(0);
  const CUmemAccessDesc dev1 = ReadWrite(1);
  table.MergeAccess(a, 2 * k2MiB, &dev0, 1);
  table.MergeAccess(a, 2 * k2MiB, &dev1, 1);
  CUmemAccessDesc dev0_read = dev0;
  dev0_read.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  table.MergeAccess(a, k2MiB, &dev0_read, 1);
  auto mappings = table.Mappings();
  ASSERT_EQ(mappings.size(), 2u);
  ASSERT_EQ(mappings[0].access_count, 2u);
  EXPECT_EQ(mappings[0].access[0].location_id, 0);
  EXPECT_EQ(mappings[0].access[0].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READ));
  EXPECT_EQ(mappings[0].access[1].location_id, 1);
  EXPECT_EQ(mappings[0].access[1].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  ASSERT_EQ(mappings[1].access_count, 2u);
  EXPECT_EQ(mappings[1].access[0].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));

  // PROT_NONE revokes a location.
  CUmemAccessDesc none = dev1;
  none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  table.MergeAccess(a + k2MiB, k2MiB, &none, 1);
  mappings = table.Mappings();
  ASSERT_EQ(mappings[1].access_count, 1u);
  EXPECT_EQ(mappings[1].access[0].location_id, 0);

  // Records carry the merged descriptors.
  auto records = table.Inspect();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(static_cast<proto::RecordKind>(records[1].kind), proto::RecordKind::kMapping);
  EXPECT_EQ(records[1].address, a);
  EXPECT_EQ(records[1].access_count, 2u);
  EXPECT_EQ(records[2].offset, k2MiB);
  EXPECT_EQ(records[2].access_count, 1u);
}

TEST(SharingTable, AccessBeyondTheDescriptorLimitDoesNotFit) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x80, k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  ASSERT_TRUE(table.AddMapping(0x40000000, k2MiB, 0, key, h));
  std::vector<CUmemAccessDesc> many;
  for (int d = 0; d < static_cast<int>(proto::kMaxAccess); ++d) many.push_back(ReadWrite(d));
  EXPECT_TRUE(table.AccessFits(0x40000000, k2MiB, many.data(), many.size()));
  table.MergeAccess(0x40000000, k2MiB, many.data(), many.size());
  const CUmemAccessDesc extra = ReadWrite(static_cast<int>(proto::kMaxAccess));
  EXPECT_FALSE(table.AccessFits(0x40000000, k2MiB, &extra, 1));
  EXPECT_TRUE(table.AccessFits(0x40000000, k2MiB, &many[3], 1));  // an update still fits
}

TEST(SharingTable, UntrackedImportsAreCountedUntilReleased) {
  SharingTable table;
  table.CountUntrackedImport(0x90, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  table.NoteUntrackedRetain(0x90);
  table.NoteUntrackedRetain(0x91);  // not an untracked import: ignored
  EXPECT_EQ(table.Counts().untracked_imports, 1u);  // one allocation, two references
  table.ForgetUntrackedImport(0x90);
  EXPECT_EQ(table.Counts().untracked_imports, 1u);
  table.ForgetUntrackedImport(0x91);
  EXPECT_EQ(table.Counts().untracked_imports, 1u);
  table.ForgetUntrackedImport(0x90);
  EXPECT_EQ(table.Counts().untracked_imports, 0u);
  EXPECT_TRUE(table.UntrackedRecords().empty());
  table.ForgetUntrackedImport(0x90);  // released once too often by the application: ignored
  EXPECT_EQ(table.Counts().untracked_imports, 0u);
}

TEST(SharingTable, UntrackedImportRecordsNameLocationTypeAndEveryMapping) {
  SharingTable table;
  const CUmemAllocationProp device1 = PosixProp(1);
  table.CountUntrackedImport(0x90, &device1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  table.CountUntrackedImport(0x70, nullptr, CU_MEM_HANDLE_TYPE_FABRIC);
  table.NoteUntrackedMapping(0x50000000, k2MiB, k2MiB, 0x90);  // second half, higher VA
  table.NoteUntrackedMapping(0x40000000, k2MiB, 0, 0x90);
  table.NoteUntrackedMapping(0x60000000, k2MiB, 0, 0x91);      // not an import: ignored
  EXPECT_EQ(table.Counts().untracked_imports, 2u);
  EXPECT_EQ(table.Counts().mappings, 0u);  // untracked mappings are not tracked ones
  const std::vector<proto::Record> records = table.UntrackedRecords();
  ASSERT_EQ(records.size(), 3u);
  // Handle order: 0x70 (unmapped: one record, address 0), then 0x90's mappings by VA.
  EXPECT_EQ(static_cast<proto::RecordKind>(records[0].kind), proto::RecordKind::kUntrackedImport);
  EXPECT_EQ(records[0].id.local_id, 0x70u);
  EXPECT_EQ(records[0].id.creator_pid, 0);
  EXPECT_EQ(records[0].address, 0u);
  EXPECT_EQ(records[0].size, 0u);
  EXPECT_EQ(records[0].location_type, 0);  // the driver gave no properties
  EXPECT_EQ(records[0].handle_types, static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_FABRIC));
  EXPECT_EQ(records[0].handle_count, 1u);
  EXPECT_EQ(records[0].flags, proto::kShared | proto::kHandleLive);
  for (size_t i : {1u, 2u}) {
    EXPECT_EQ(static_cast<proto::RecordKind>(records[i].kind), proto::RecordKind::kUntrackedImport);
    EXPECT_EQ(records[i].id.local_id, 0x90u);
    EXPECT_EQ(records[i].size, k2MiB);
    EXPECT_EQ(records[i].object_size, 0u);  // never reported by the driver for an import
    EXPECT_EQ(records[i].location_type, static_cast<int32_t>(CU_MEM_LOCATION_TYPE_DEVICE));
    EXPECT_EQ(records[i].location_id, 1);
    EXPECT_EQ(records[i].alloc_type, static_cast<int32_t>(CU_MEM_ALLOCATION_TYPE_PINNED));
    EXPECT_EQ(records[i].handle_types,
              static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  }
  EXPECT_EQ(records[1].address, 0x40000000u);
  EXPECT_EQ(records[1].offset, 0u);
  EXPECT_EQ(records[2].address, 0x50000000u);
  EXPECT_EQ(records[2].offset, k2MiB);
}

TEST(SharingTable, UntrackedImportLivesWhileMappedAndGoesWithItsLastMapping) {
  SharingTable table;
  const CUmemAllocationProp prop = PosixProp(0);
  table.CountUntrackedImport(0x90, &prop, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  table.NoteUntrackedMapping(0x40000000, k2MiB, 0, 0x90);
  table.NoteUntrackedMapping(0x50000000, k2MiB, 0, 0x90);
  table.ForgetUntrackedImport(0x90);  // mapped, then released at once (as NCCL does)
  EXPECT_EQ(table.Counts().untracked_imports, 1u);
  std::vector<proto::Record> records = table.UntrackedRecords();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].handle_count, 0u);
  EXPECT_EQ(records[0].flags, proto::kShared);
  // A retain inside its mapping references it again; a map of the released value does not
  // (the value names some other allocation now).
  table.NoteUntrackedRetain(0x90);
  EXPECT_EQ(table.UntrackedRecords()[0].handle_count, 1u);
  table.ForgetUntrackedImport(0x90);
  table.NoteUntrackedMapping(0x60000000, k2MiB, 0, 0x90);
  EXPECT_EQ(table.UntrackedRecords().size(), 2u);
  // An unmap of a range holding no untracked mapping changes nothing; then each goes.
  table.ForgetUntrackedMappings(0x45000000, k2MiB);
  EXPECT_EQ(table.UntrackedRecords().size(), 2u);
  table.ForgetUntrackedMappings(0x40000000, k2MiB);
  records = table.UntrackedRecords();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].address, 0x50000000u);
  table.ForgetUntrackedMappings(0x50000000, k2MiB);
  EXPECT_EQ(table.Counts().untracked_imports, 0u);
  EXPECT_TRUE(table.UntrackedRecords().empty());
}

TEST(SharingTable, UnmappedUntrackedImportKeepsItsHandleReference) {
  SharingTable table;
  table.CountUntrackedImport(0x90, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  table.NoteUntrackedMapping(0x40000000, k2MiB, 0, 0x90);
  table.ForgetUntrackedMappings(0x40000000, k2MiB);
  const std::vector<proto::Record> records = table.UntrackedRecords();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].address, 0u);  // not mapped any more, still held
  EXPECT_EQ(records[0].handle_count, 1u);
}

TEST(SharingTable, UntrackedRecordsDescribeAtMostTheReportedNumberOfImports) {
  SharingTable table;
  for (CUmemGenericAllocationHandle real = 0x100; real < 0x100 + 11; ++real) {
    table.CountUntrackedImport(real, nullptr, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  }
  EXPECT_EQ(table.Counts().untracked_imports, 11u);
  const std::vector<proto::Record> records = table.UntrackedRecords();
  ASSERT_EQ(records.size(), proto::kMaxUntrackedReported);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i].id.local_id, 0x100 + i);
}

TEST(SharingTable, InspectDescribesAllocations) {
  SharingTable table;
  CUmemAllocationProp host = PosixProp();
  host.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  const uint64_t h = table.AddCreated(0xA0, 3 * k2MiB, host, nullptr, kSelf);
  table.MarkShared(table.Pin(h)->key, nullptr);
  auto records = table.Inspect();
  ASSERT_EQ(records.size(), 1u);
  const proto::Record& r = records[0];
  EXPECT_EQ(static_cast<proto::RecordKind>(r.kind), proto::RecordKind::kAllocation);
  EXPECT_EQ(r.flags, proto::kCreator | proto::kHandleLive | proto::kShared);
  EXPECT_EQ(r.object_size, 3 * k2MiB);
  EXPECT_EQ(r.location_type, static_cast<int32_t>(CU_MEM_LOCATION_TYPE_HOST_NUMA));
  EXPECT_EQ(r.handle_types, static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_EQ(r.id.creator_pid, 4242);
  TableCounts counts = table.Counts();
  EXPECT_EQ(counts.records, 1u);
  EXPECT_EQ(counts.tracked_bytes, 3 * k2MiB);
}

TEST(SharingTable, SetRealHandleSwapsWhatPinsSee) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0xB0, k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  ASSERT_TRUE(table.SetRealHandle(key, std::nullopt));
  EXPECT_FALSE(table.Pin(h)->has_real);
  ASSERT_TRUE(table.SetRealHandle(key, 0xB1));
  EXPECT_EQ(table.Pin(h)->real, 0xB1u);
  EXPECT_FALSE(table.SetRealHandle(key + 100, 0xB2));
}

}  // namespace
}  // namespace cusnap::shim

namespace cusnap::shim {
namespace {

// A pipe's read end stands in for a driver export descriptor.
int PipeReadEnd(int* write_end) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  *write_end = fds[1];
  return fds[0];
}

TEST(ExportCache, ServesDupsUntilInvalidated) {
  ExportCache cache;
  int writer = -1;
  const int fd = PipeReadEnd(&writer);
  cache.Put(TicketKind::kUnicast, 7, fd, 4096);
  EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);  // an exec'd program never inherits it
  EXPECT_TRUE(cache.Contains(TicketKind::kUnicast, 7));
  EXPECT_FALSE(cache.Contains(TicketKind::kMulticast, 7));

  uint64_t size = 0;
  const int dup = cache.Dup(TicketKind::kUnicast, 7, &size);
  ASSERT_GE(dup, 0);
  EXPECT_NE(dup, fd);
  EXPECT_EQ(size, 4096u);
  ASSERT_EQ(write(writer, "k", 1), 1);
  char c = 0;
  ASSERT_EQ(read(dup, &c, 1), 1);  // the dup is the same pipe
  EXPECT_EQ(c, 'k');
  close(dup);

  // A second Put for the same object keeps the first descriptor and closes the new one.
  int writer2 = -1;
  const int second = PipeReadEnd(&writer2);
  cache.Put(TicketKind::kUnicast, 7, second, 8192);
  EXPECT_EQ(fcntl(second, F_GETFD), -1);
  EXPECT_EQ(cache.size(), 1u);

  cache.Invalidate(TicketKind::kUnicast, 7);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // closed
  EXPECT_EQ(cache.Dup(TicketKind::kUnicast, 7, &size), -1);
  EXPECT_EQ(errno, ENOENT);
  close(writer);
  close(writer2);
}

TEST(ExportCache, ClearClosesEverything) {
  ExportCache cache;
  int w1 = -1, w2 = -1;
  const int a = PipeReadEnd(&w1);
  const int b = PipeReadEnd(&w2);
  cache.Put(TicketKind::kUnicast, 1, a, 1);
  cache.Put(TicketKind::kMulticast, 1, b, 1);  // same id, other kind: a separate entry
  EXPECT_EQ(cache.size(), 2u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(fcntl(a, F_GETFD), -1);
  EXPECT_EQ(fcntl(b, F_GETFD), -1);
  close(w1);
  close(w2);
}

TEST(SharingTable, MappingRangeAtGivesTheContainingMapping) {
  SharingTable table;
  const uint64_t h = table.AddCreated(0x80, 4 * k2MiB, PosixProp(), nullptr, kSelf);
  const AllocationKey key = table.Pin(h)->key;
  table.Unpin(key);
  const CUdeviceptr a = 0x50000000;
  ASSERT_TRUE(table.AddMapping(a, 2 * k2MiB, 0, key, h));
  ASSERT_TRUE(table.AddMapping(a + 4 * k2MiB, 2 * k2MiB, 2 * k2MiB, key, h));
  EXPECT_EQ(table.MappingRangeAt(a + k2MiB + 7), std::make_optional(std::make_pair(a, 2 * k2MiB)));
  EXPECT_EQ(table.MappingRangeAt(a + 4 * k2MiB),
            std::make_optional(std::make_pair(a + 4 * k2MiB, 2 * k2MiB)));
  EXPECT_FALSE(table.MappingRangeAt(a + 2 * k2MiB));  // the hole between them
  EXPECT_FALSE(table.MappingRangeAt(a - 1));
}

TEST(SharingTable, ImportedPropertiesAreTheImportTimeAnswer) {
  SharingTable table;
  CUmemAllocationProp prop = PosixProp();
  prop.location.id = 1;
  const proto::ObjectId id{4242, 0, 7, 3};
  bool duplicate = false;
  const uint64_t imported = table.AddImported(id, proto::Capability{{1, 2}}, 0x90, k2MiB, prop, nullptr, &duplicate);
  ASSERT_FALSE(duplicate);
  auto answer = table.ImportedProperties(imported);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->location.id, 1);
  EXPECT_EQ(answer->requestedHandleTypes, prop.requestedHandleTypes);
  const uint64_t created = table.AddCreated(0x91, k2MiB, PosixProp(), nullptr, kSelf);
  EXPECT_FALSE(table.ImportedProperties(created));  // the creator asks the driver
  EXPECT_FALSE(table.ImportedProperties(created + 1000));
}

}  // namespace
}  // namespace cusnap::shim

namespace cusnap::shim {
namespace {

// DRIVER-FACTS F12: the driver keeps one host access per mapping, set by HOST and
// HOST_NUMA descriptors alike (the last one wins). One record entry stands for it, so a
// replay after restore sets what the application last set, whatever the order.
struct AccessOnly {
  uint32_t access_count = 0;
  proto::AccessRecord access[proto::kMaxAccess] = {};
};

TEST(AccessMerge, HostAndHostNumaAreOneHostAccess) {
  AccessOnly m;
  const CUmemAccessDesc dev0{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const CUmemAccessDesc host_read{{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_READ};
  const CUmemAccessDesc numa_rw{{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const CUmemAccessDesc host_none{{CU_MEM_LOCATION_TYPE_HOST, 0}, CU_MEM_ACCESS_FLAGS_PROT_NONE};
  ASSERT_TRUE(MergeAccessDescriptor(m, dev0));
  ASSERT_TRUE(MergeAccessDescriptor(m, host_read));
  ASSERT_TRUE(MergeAccessDescriptor(m, numa_rw));
  ASSERT_EQ(m.access_count, 2u);  // device 0, and one host entry: the last descriptor's
  EXPECT_EQ(m.access[1].location_type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(m.access[1].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  ASSERT_TRUE(MergeAccessDescriptor(m, host_none));  // NONE through HOST clears HOST_NUMA's too
  ASSERT_EQ(m.access_count, 1u);
  EXPECT_EQ(m.access[0].location_type, CU_MEM_LOCATION_TYPE_DEVICE);
}

}  // namespace
}  // namespace cusnap::shim
