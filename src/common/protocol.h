// The wire protocol between a shim's endpoint and its clients (peer shims asking for an
// export, the coordinator driving the lifecycle): its version, the ops and the shim's
// states (one list each, yielding the enum and its names), the packet framing and the
// fixed-size topology Record. The messages themselves (a struct per request and per reply,
// each with its encoding and decoding) are in messages.h. Both sides include these files;
// they are the only way the coordinator reaches a shim (DESIGN.md, "Parts").
//
// Transport: one SOCK_SEQPACKET connection per request to <control dir>/<pid>.sock. A
// message is its op and a payload of bytes (messages.h writes and reads it); it travels as
// one or more packets, each a FrameHeader followed by part of the payload, all but the last
// flagged kMore. At most one descriptor travels, as SCM_RIGHTS, with the first packet of the
// reply to kExport. Integers are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace cusnap::proto {

inline constexpr uint32_t kMagic = 0x504e5343;  // "CSNP"
/// Version 2: typed messages (messages.h), errors of any length. Version 3: INSPECT replies
/// carry the importers of this process's exports; kCheckResources; kSave carries the
/// checkpoint's id and kIdentify reports it; kSave runs before kDetachMulticast. Version 4:
/// every lifecycle request carries a lease (StepRequest::lease_ms), kRenew and kCommit; a
/// failed destructive step keeps its state (it can be run again) instead of FAILED. Version 5:
/// lifecycle requests say whether the command holds the process stopped once checkpointed
/// (StepRequest::held). Version 6: kWriteCarrier and kReadCarrier (a dump writes the carrier
/// beside CRIU's images, StepRequest::carrier_path). Version 7: kHeldAllocations (a creator's
/// REALLOCATE asks its importers what they still hold). Version 8: kWriteCarrier replies
/// carry each part file's chunk digests (StepReply::files). Version 9: kIdentify reports the
/// settings the shim did not take (IdentifyReply::settings), kCheckResources the host memory
/// the carrier holds (ResourcesReply::carrier_held). A peer speaking another version is
/// refused with both versions named (socket.h, ReceiveMessage).
inline constexpr uint16_t kVersion = 9;

/// Requests a client can send: X(enumerator, value, name, kind), the kind an OpKind (below):
/// kStep ops run on the shim's control thread, one at a time, as lifecycle steps; kQuery ops
/// there too, answered from the tables; kPeer ops are served by the peer thread without the
/// control thread (kExport from the export cache, no table lock), so that two shims asking
/// each other in the middle of their own steps never wait on each other.
///  kExport: a fresh raw POSIX descriptor for (creator id, allocation id)
///  kIdentify: pid, start time, state, counts, failure text, untracked imports
///  kInspect: the sharing table as Records (read-only)
///  kQuiesce: ACTIVE -> QUIESCED: tracked application calls wait
///  kSave: QUIESCED -> SAVED: carrier D2H of every tracked creator allocation; keeps the
///    request's checkpoint id
///  kDetachMulticast: SAVED -> MULTICAST_DETACHED (after the state file is written)
///  kRelease: -> RELEASED: unmap tracked mappings (VA kept), release handles
///  kReallocate: -> REALLOCATED: fresh allocations at the same VAs, carrier H2D
///  kImport: -> IMPORTED: importers fetch fresh descriptors and map
///  kMulticastCreate, kMulticastImport: the multicast rebuild (multicast_steps.h)
///  kMulticastJoin: add devices (barrier: binds wait for the whole team)
///  kMulticastBind: bind + map multicast
///  kResume: QUIESCED, SAVED or MULTICAST_DETACHED (nothing destroyed yet) -> ACTIVE: a
///    refused checkpoint; forgets the checkpoint id
///  kActivate: after restore's comparison: -> ACTIVE, application calls resume
///  kCheckResources: read-only; does the process have the descriptors and host memory the
///    rest of the checkpoint and the restore need (messages.h, ResourcesRequest)
///  kRenew: any state; renews the command's lease (nothing else changes)
///  kCommit: SAVED -> SAVED: the command passed its point of no return; from now on the
///    shim never rolls back by itself when the lease expires (its gate stays closed until
///    a restore or recover brings it to ACTIVE)
///  kWriteCarrier: RELEASED -> RELEASED (`cusnap dump`): the carrier's saved bytes to the
///    part files StepRequest::carrier_path names, on several threads, durably; then the arena
///    goes back to the kernel, so CRIU's single thread does not write those bytes again
///  kReadCarrier: RELEASED -> RELEASED: the files written by kWriteCarrier, now in the
///    directory StepRequest::carrier_path names, back into the arena (nothing when the
///    carrier was not written out); kReallocate refuses until then
///  kHeldAllocations (kPeer, read-only): which of the given allocations this process holds a
///    driver handle of, from the sharing table; a creator's kReallocate asks each of its
///    importers first (a fresh allocation is not what an importer still holding the old
///    one maps)
#define CUSNAP_PROTO_OPS(X)                          \
  X(kExport, 1, "EXPORT", kPeer)                     \
  X(kIdentify, 2, "IDENTIFY", kQuery)                \
  X(kInspect, 3, "INSPECT", kQuery)                  \
  X(kQuiesce, 4, "QUIESCE", kStep)                   \
  X(kDetachMulticast, 5, "DETACH_MULTICAST", kStep)  \
  X(kSave, 6, "SAVE", kStep)                         \
  X(kRelease, 7, "RELEASE", kStep)                   \
  X(kReallocate, 8, "REALLOCATE", kStep)             \
  X(kImport, 9, "IMPORT", kStep)                     \
  X(kMulticastCreate, 10, "MULTICAST_CREATE", kStep) \
  X(kMulticastImport, 11, "MULTICAST_IMPORT", kStep) \
  X(kMulticastJoin, 12, "MULTICAST_JOIN", kStep)     \
  X(kMulticastBind, 13, "MULTICAST_BIND", kStep)     \
  X(kResume, 14, "RESUME", kStep)                    \
  X(kActivate, 15, "ACTIVATE", kStep)                \
  X(kCheckResources, 16, "CHECK_RESOURCES", kQuery)  \
  X(kRenew, 17, "RENEW", kStep)                      \
  X(kCommit, 18, "COMMIT", kStep)                    \
  X(kWriteCarrier, 19, "WRITE_CARRIER", kStep)       \
  X(kReadCarrier, 20, "READ_CARRIER", kStep)        \
  X(kHeldAllocations, 21, "HELD_ALLOCATIONS", kPeer)

/// The shim's lifecycle states (DESIGN.md, "Lifecycle"): X(enumerator, value, name).
/// kRestored: the multicast rebuild is done and the coordinator still compares INSPECT with
/// the state file; application calls wait until kActivate.
#define CUSNAP_PROTO_SHIM_STATES(X)                  \
  X(kActive, 1, "ACTIVE")                            \
  X(kQuiesced, 2, "QUIESCED")                        \
  X(kMulticastDetached, 3, "MULTICAST_DETACHED")     \
  X(kSaved, 4, "SAVED")                              \
  X(kReleased, 5, "RELEASED")                        \
  X(kReallocated, 6, "REALLOCATED")                  \
  X(kImported, 7, "IMPORTED")                        \
  X(kMulticastCreated, 8, "MULTICAST_CREATED")       \
  X(kMulticastImported, 9, "MULTICAST_IMPORTED")     \
  X(kMulticastJoined, 10, "MULTICAST_JOINED")        \
  X(kRestored, 12, "RESTORED")                       \
  X(kFailed, 11, "FAILED")

#define CUSNAP_PROTO_ENUMERATOR(name, value, text) name = value,
#define CUSNAP_PROTO_NAME_CASE(name, value, text) \
  case name:                                      \
    return text;
#define CUSNAP_PROTO_OP_ENUMERATOR(name, value, text, kind) name = value,
#define CUSNAP_PROTO_OP_NAME_CASE(name, value, text, kind) \
  case name:                                               \
    return text;
#define CUSNAP_PROTO_OP_KIND_CASE(name, value, text, kind) \
  case name:                                               \
    return OpKind::kind;

enum class Op : uint16_t { CUSNAP_PROTO_OPS(CUSNAP_PROTO_OP_ENUMERATOR) };
enum class ShimState : uint32_t { CUSNAP_PROTO_SHIM_STATES(CUSNAP_PROTO_ENUMERATOR) };

/// Name of a value outside the lists below.
inline constexpr const char* kUnknownName = "UNKNOWN";

/// The op's name as DESIGN.md writes it ("QUIESCE", "SAVE", ...); kUnknownName for a value
/// outside the list.
constexpr const char* OpName(Op op) {
  using enum Op;
  switch (op) { CUSNAP_PROTO_OPS(CUSNAP_PROTO_OP_NAME_CASE) }
  return kUnknownName;
}

/// Who answers an op in the shim (the kind column of CUSNAP_PROTO_OPS): kPeer, the endpoint's
/// peer thread, from the export cache; kQuery, the control thread, from the tables, changing
/// nothing; kStep, the control thread, a lifecycle step (StepRequest in, StepReply out).
enum class OpKind : uint8_t { kPeer, kQuery, kStep };

/// The op's kind; nullopt for a value outside the list.
constexpr std::optional<OpKind> KindOf(Op op) {
  using enum Op;
  switch (op) { CUSNAP_PROTO_OPS(CUSNAP_PROTO_OP_KIND_CASE) }
  return std::nullopt;
}

/// The state's name as DESIGN.md writes it ("ACTIVE", "QUIESCED", ...); kUnknownName for a
/// value outside the list.
constexpr const char* ShimStateName(ShimState state) {
  using enum ShimState;
  switch (state) { CUSNAP_PROTO_SHIM_STATES(CUSNAP_PROTO_NAME_CASE) }
  return kUnknownName;
}

#undef CUSNAP_PROTO_ENUMERATOR
#undef CUSNAP_PROTO_NAME_CASE
#undef CUSNAP_PROTO_OP_ENUMERATOR
#undef CUSNAP_PROTO_OP_NAME_CASE
#undef CUSNAP_PROTO_OP_KIND_CASE

/// FrameHeader flags.
inline constexpr uint32_t kMore = 1u << 0;  ///< more packets of this message follow

/// What every packet starts with. magic, version and op sit where every version put them, so
/// two versions always tell each other apart.
struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t op;     ///< Op; a reply echoes its request's
  uint32_t flags;  ///< kMore
  uint32_t size;   ///< payload bytes that follow in this packet
};
static_assert(sizeof(FrameHeader) == 16);

/// One packet, header included, is at most this long.
inline constexpr size_t kMaxPacket = 64 * 1024;
/// A message's payload, all packets together, is at most this long (about 300k Records):
/// reassembly stops there, so a broken peer cannot make the receiver grow without bound.
inline constexpr size_t kMaxMessage = 128u << 20;

/// What a Record describes.
enum class RecordKind : uint32_t {
  kAllocation = 1,
  kMapping = 2,
  kMulticast = 3,
  kMulticastDevice = 4,
  kMulticastBinding = 5,
  kMulticastMapping = 6,
  /// kIdentify replies only (never INSPECT, never a state file: the checkpoint is refused
  /// while one is live): an allocation imported from a descriptor that is not a cusnap
  /// ticket. One record per VA range it is mapped at (address, size, offset), or one with
  /// address and size 0 when it is mapped nowhere. id = {0, 0, the real handle} (its creator
  /// is unknown); object_size 0 (the driver reports no size for an imported handle);
  /// alloc_type and location_* as cuMemGetAllocationPropertiesFromHandle answered at import
  /// (location_type 0 when it did not); handle_types = the one shareable handle type it was
  /// imported from; handle_count = live references (the import and its retains).
  kUntrackedImport = 7,
};

/// kIdentify describes at most this many untracked imports (all their mappings each); its
/// untracked_imports field says how many are live.
inline constexpr uint32_t kMaxUntrackedReported = 8;

/// Record flags.
inline constexpr uint32_t kCreator = 1u << 0;     ///< this process created the allocation/object
inline constexpr uint32_t kHandleLive = 1u << 1;  ///< the application holds a live logical handle
inline constexpr uint32_t kShared = 1u << 2;      ///< exported or imported at least once

inline constexpr uint32_t kMaxAccess = 16;  ///< access descriptors per mapping (one per device)

/// One access descriptor on the wire (CUmemAccessDesc is 12 bytes; never memcpy it here).
struct AccessRecord {
  int32_t location_type;  ///< CUmemLocationType
  int32_t location_id;    ///< device ordinal (or NUMA id)
  uint32_t flags;         ///< CUmemAccess_flags
  uint32_t reserved;
};

/// The secret that makes a ticket a capability (DESIGN.md, "Tickets"): 128 bits its creator
/// derives from the object and a random per-process key, so only a process that was given a
/// ticket (or the creator) can name it in kExport; ids alone are guessable, this is not.
struct Capability {
  uint64_t word[2];
};

/// Identity of an allocation or multicast object, stable across checkpoint and restore:
/// the creator process (pid + start time in clock ticks since boot) and its local id.
struct ObjectId {
  int32_t creator_pid;
  uint32_t reserved;
  uint64_t creator_start;
  uint64_t local_id;
};

/// One topology record (INSPECT reply, state file, restore oracle). Sizes in bytes.
struct Record {
  uint32_t kind;            ///< RecordKind
  uint32_t flags;           ///< kCreator | kHandleLive | kShared
  ObjectId id;              ///< allocation (unicast kinds) or multicast object
  uint64_t address;         ///< mapping VA; BindAddr member VA
  uint64_t size;            ///< mapping / binding size
  uint64_t offset;          ///< mapping offset in the allocation; binding multicast offset
  uint64_t object_size;     ///< allocation size; multicast size as requested
  int32_t alloc_type;       ///< CUmemAllocationType
  int32_t location_type;    ///< CUmemLocationType (DEVICE, HOST_NUMA, ...)
  int32_t location_id;
  uint32_t handle_types;    ///< requested CUmemAllocationHandleType bits
  uint32_t handle_count;    ///< live logical handles the application holds
  uint32_t access_count;
  AccessRecord access[kMaxAccess];
  // Multicast fields.
  ObjectId member;          ///< binding: the member allocation (BindMem or tracked BindAddr)
  uint64_t member_offset;   ///< binding: offset in the member allocation
  uint64_t op_flags;        ///< bind flags / multicast map flags
  uint64_t mc_flags;        ///< CUmulticastObjectProp::flags
  uint64_t extent;          ///< multicast: largest offset+size the driver accepted
  uint32_t num_devices;     ///< multicast: team size
  int32_t device;           ///< device ordinal (multicast device, binding device)
  uint32_t bind_kind;       ///< 1 BindMem, 2 BindAddr
  uint32_t bind_api;        ///< 1 original ABI, 2 device-explicit (CUDA 13.1)
};
static_assert(sizeof(Record) % 8 == 0);

/// One process that fetched a descriptor of one of this process's exported objects (kExport,
/// identified by SO_PEERCRED): INSPECT reports those still alive with the same start time,
/// so the coordinator can refuse a checkpoint that leaves an importer out.
struct Importer {
  ObjectId id;          ///< the exported object (this process created it)
  uint32_t kind;        ///< TicketKind: 1 unicast allocation, 2 multicast object
  int32_t pid;          ///< the importer
  uint64_t start_time;  ///< its start time, clock ticks since boot
};
static_assert(sizeof(Importer) == 40);

/// One chunk of a carrier part file as kWriteCarrier wrote it: its byte range in the file and
/// its XXH3-128 digest (common/chunk_digest.h).
struct CarrierChunk {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t digest_high = 0;
  uint64_t digest_low = 0;
};
static_assert(sizeof(CarrierChunk) == 32);

/// The export cache remembers at most this many importers per exported object (the dead are
/// dropped first when it is full; past it a new importer is not remembered, and a warning is
/// logged).
inline constexpr uint32_t kMaxImportersPerObject = 32;

/// About this many Records fill one packet: a message with more spans several.
inline constexpr size_t kMaxRecordsPerMessage = (kMaxPacket - sizeof(FrameHeader)) / sizeof(Record);

}  // namespace cusnap::proto
