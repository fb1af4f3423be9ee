// The multicast table (src/shim/tables/multicast_table.h) on its own: logical handles that carry the
// multicast bit, references and drops as the driver keeps objects (alive while a handle or a
// mapping is), devices, bindings and the extent the driver accepted, mappings by range with
// access merged per location, retain inside a mapping, and the INSPECT records.
#include "shim/tables/multicast_table.h"

#include <gtest/gtest.h>

#include <optional>

#include "shim_printers.h"

namespace cusnap::shim {
namespace {

constexpr uint64_t kMiB2 = 2u << 20;
constexpr CUdeviceptr kVa = 0x7f0000000000;

MulticastProperties Prop(uint32_t devices = 2, uint64_t size = kMiB2) {
  return MulticastProperties{devices, size, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0};
}

ProcessIdentity Self() { return ProcessIdentity{100, 5000}; }

CUmemAccessDesc Access(int device, CUmemAccess_flags flags) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = flags;
  return d;
}

MulticastBinding Binding(int device, uint64_t offset, uint64_t size) {
  MulticastBinding b;
  b.device = device;
  b.mc_offset = offset;
  b.size = size;
  b.kind = BindKind::kMem;
  b.api = 2;
  b.tracked_member = true;
  b.member.creator_pid = 100;
  b.member.creator_start = 5000;
  b.member.local_id = 7;
  b.member_offset = 0;
  return b;
}

TEST(MulticastTable, HandlesCarryTheMulticastBitAndNameOneObject) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x1234, Prop(), nullptr, Self());
  ASSERT_NE(h, 0u);
  EXPECT_TRUE(IsTagged(h));
  EXPECT_TRUE(IsMulticastHandle(h));
  EXPECT_FALSE(IsMulticastHandle(kLogicalTag | 1));  // an allocation's logical handle
  EXPECT_TRUE(table.Knows(h));
  auto pinned = table.Pin(h);
  ASSERT_TRUE(pinned.has_value());
  EXPECT_EQ(pinned->real, 0x1234u);
  EXPECT_TRUE(pinned->creator);
  EXPECT_EQ(pinned->id.creator_pid, 100);
  EXPECT_EQ(pinned->id.local_id, 1u);
  EXPECT_EQ(pinned->prop.num_devices, 2u);
  EXPECT_FALSE(table.Unpin(pinned->key).has_value());  // the handle still holds it
  const auto alias = table.AliasById(pinned->id);
  ASSERT_TRUE(alias.has_value());
  EXPECT_NE(*alias, h);
  std::optional<MulticastDropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  EXPECT_FALSE(dropped.has_value());
  ASSERT_TRUE(table.ReleaseHandle(*alias, &dropped));
  ASSERT_TRUE(dropped.has_value());
  EXPECT_EQ(dropped->real, 0x1234u);
  EXPECT_TRUE(dropped->creator);
  EXPECT_FALSE(table.Knows(h));
  EXPECT_FALSE(table.ReleaseHandle(h, &dropped));
}

TEST(MulticastTable, AnImportOfAnObjectHeldAlreadyAliasesIt) {
  MulticastTable table;
  proto::ObjectId id{};
  id.creator_pid = 200;
  id.creator_start = 6000;
  id.local_id = 3;
  bool duplicate = true;
  const uint64_t first = table.AddImported(id, proto::Capability{{1, 2}}, 0x55, Prop(4), nullptr, &duplicate);
  EXPECT_FALSE(duplicate);
  const uint64_t second = table.AddImported(id, proto::Capability{{1, 2}}, 0x66, Prop(4), nullptr, &duplicate);
  EXPECT_TRUE(duplicate);  // the caller releases 0x66
  EXPECT_NE(first, second);
  EXPECT_EQ(table.Pin(second)->real, 0x55u);
  const auto objects = table.Objects();
  ASSERT_EQ(objects.size(), 1u);
  EXPECT_FALSE(objects[0].creator);
  EXPECT_TRUE(objects[0].shared);
  EXPECT_EQ(objects[0].handles, 2u);
}

TEST(MulticastTable, AMappingKeepsTheObjectAndRetainGivesItsHandleBack) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x99, Prop(), nullptr, Self());
  const MulticastKey key = table.Pin(h)->key;
  table.Unpin(key);
  ASSERT_TRUE(table.AddMapping(kVa, kMiB2, 0, 0, key, h));
  EXPECT_FALSE(table.AddMapping(kVa + kMiB2 / 2, kMiB2, 0, 0, key, h));  // overlaps
  std::optional<MulticastDropped> dropped;
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  EXPECT_FALSE(dropped.has_value());  // the mapping keeps it (and its real handle)
  EXPECT_EQ(table.Objects()[0].handles, 0u);
  EXPECT_EQ(table.Classify(kVa, kMiB2), RangeMatch::kCovers);
  EXPECT_EQ(table.Classify(kVa, kMiB2 / 2), RangeMatch::kPartial);
  EXPECT_EQ(table.Classify(kVa + kMiB2, kMiB2), RangeMatch::kNone);
  // Retain inside the mapping: the value the range was mapped with, alive again.
  const auto retained = table.RetainAt(kVa + 4096);
  ASSERT_TRUE(retained.has_value());
  EXPECT_EQ(*retained, h);
  EXPECT_EQ(table.Objects()[0].handles, 1u);
  EXPECT_FALSE(table.RetainAt(kVa + kMiB2).has_value());
  ASSERT_TRUE(table.ReleaseHandle(h, &dropped));
  const auto gone = table.RemoveMappings(kVa, kMiB2);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].real, 0x99u);
  EXPECT_TRUE(table.Objects().empty());
  EXPECT_EQ(table.Classify(kVa, kMiB2), RangeMatch::kNone);
}

TEST(MulticastTable, AccessMergesPerLocation) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x1, Prop(), nullptr, Self());
  const MulticastKey key = table.Pin(h)->key;
  table.Unpin(key);
  ASSERT_TRUE(table.AddMapping(kVa, kMiB2, 0, 0, key, h));
  const CUmemAccessDesc d0 = Access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemAccessDesc d1 = Access(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
  table.MergeAccess(kVa, kMiB2, &d0, 1);
  table.MergeAccess(kVa, kMiB2, &d1, 1);
  const CUmemAccessDesc none0 = Access(0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  table.MergeAccess(kVa, kMiB2, &none0, 1);
  const auto mappings = table.Mappings();
  ASSERT_EQ(mappings.size(), 1u);
  ASSERT_EQ(mappings[0].access_count, 1u);
  EXPECT_EQ(mappings[0].access[0].location_id, 1);
  EXPECT_EQ(mappings[0].access[0].flags, static_cast<uint32_t>(CU_MEM_ACCESS_FLAGS_PROT_READ));
}

TEST(MulticastTable, BindingsGrowTheExtentAndUnbindMatchesExactly) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x1, Prop(2, kMiB2), nullptr, Self());
  const MulticastKey key = table.Pin(h)->key;
  table.Unpin(key);
  table.AddDevice(key, 0);
  table.AddBinding(key, Binding(0, 0, kMiB2));
  table.AddBinding(key, Binding(0, 2 * kMiB2, kMiB2));  // past the requested size
  EXPECT_EQ(table.Objects()[0].extent, 3 * kMiB2);
  EXPECT_FALSE(table.RemoveBinding(key, 1, 0, kMiB2));       // another device
  EXPECT_FALSE(table.RemoveBinding(key, 0, 0, kMiB2 / 2));   // another size
  EXPECT_TRUE(table.RemoveBinding(key, 0, 2 * kMiB2, kMiB2));
  EXPECT_EQ(table.Objects()[0].bindings.size(), 1u);
  EXPECT_EQ(table.Objects()[0].extent, 3 * kMiB2);  // what the driver once accepted stays
}

TEST(MulticastTable, InspectReportsObjectDevicesBindingsThenMappings) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x1, Prop(2, kMiB2), nullptr, Self());
  const MulticastKey key = table.Pin(h)->key;
  table.Unpin(key);
  table.MarkShared(key);
  table.AddDevice(key, 1);
  MulticastBinding addr = Binding(1, 0, kMiB2);
  addr.kind = BindKind::kAddr;
  addr.api = 1;
  addr.address = 0x7e0000000000;
  table.AddBinding(key, addr);
  ASSERT_TRUE(table.AddMapping(kVa, kMiB2, 0, 0, key, h));
  const auto records = table.Inspect();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(table.RecordCount(), 4u);
  EXPECT_EQ(static_cast<proto::RecordKind>(records[0].kind), proto::RecordKind::kMulticast);
  EXPECT_EQ(records[0].flags, proto::kCreator | proto::kHandleLive | proto::kShared);
  EXPECT_EQ(records[0].object_size, kMiB2);
  EXPECT_EQ(records[0].num_devices, 2u);
  EXPECT_EQ(records[0].handle_types, static_cast<uint32_t>(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  EXPECT_EQ(records[0].handle_count, 1u);
  EXPECT_EQ(records[0].extent, kMiB2);
  EXPECT_EQ(static_cast<proto::RecordKind>(records[1].kind), proto::RecordKind::kMulticastDevice);
  EXPECT_EQ(records[1].device, 1);
  EXPECT_EQ(static_cast<proto::RecordKind>(records[2].kind), proto::RecordKind::kMulticastBinding);
  EXPECT_EQ(records[2].bind_kind, 2u);
  EXPECT_EQ(records[2].bind_api, 1u);
  EXPECT_EQ(records[2].address, 0x7e0000000000u);
  EXPECT_EQ(records[2].member.local_id, 7u);
  EXPECT_EQ(static_cast<proto::RecordKind>(records[3].kind), proto::RecordKind::kMulticastMapping);
  EXPECT_EQ(records[3].address, kVa);
  EXPECT_EQ(records[3].size, kMiB2);
  for (const auto& r : records) EXPECT_EQ(r.id.creator_pid, 100);
}

TEST(MulticastTable, ARealHandleCanBeTakenAwayAndGivenBack) {
  MulticastTable table;
  const uint64_t h = table.AddCreated(0x10, Prop(), nullptr, Self());
  const MulticastKey key = table.Pin(h)->key;
  table.Unpin(key);
  ASSERT_TRUE(table.SetRealHandle(key, std::nullopt));
  EXPECT_FALSE(table.Pin(h)->has_real);
  table.Unpin(key);
  ASSERT_TRUE(table.SetRealHandle(key, CUmemGenericAllocationHandle{0}));  // 0 is a valid handle
  auto pinned = table.Pin(h);
  EXPECT_TRUE(pinned->has_real);
  EXPECT_EQ(pinned->real, 0u);
  EXPECT_FALSE(table.SetRealHandle(key + 1, std::nullopt));
}

}  // namespace
}  // namespace cusnap::shim
