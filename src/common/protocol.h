// The wire protocol between a shim's endpoint and its clients (peer shims asking for an
// export, the coordinator driving the lifecycle). Both sides include this file; it is the
// only way the coordinator reaches a shim (DESIGN.md, "Parts").
//
// Transport: one SOCK_SEQPACKET connection per request to <control dir>/<pid>.sock. Every
// message is one Header, optionally followed in the same packet by `count` fixed-size
// Records; a reply longer than kMaxRecordsPerMessage records is split over several packets,
// all but the last flagged kMore. At most one descriptor travels, as SCM_RIGHTS, on the
// reply to kExport. All structs are plain data, little-endian, zero-filled before use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cusnap::proto {

inline constexpr uint32_t kMagic = 0x504e5343;  // "CSNP"
inline constexpr uint16_t kVersion = 1;

/// Requests a client can send. Lifecycle operations run on the shim's control thread, one
/// at a time; kExport is served by the peer thread from the export cache (no table lock).
enum class Op : uint16_t {
  kExport = 1,           ///< peer: a fresh raw POSIX descriptor for (creator id, allocation id)
  kIdentify = 2,         ///< pid, start time, phase, failure text; untracked imports as
                         ///< kUntrackedImport records
  kInspect = 3,          ///< the sharing table as Records (read-only)
  kQuiesce = 4,          ///< ACTIVE -> QUIESCED: tracked application calls wait
  kDetachMulticast = 5,  ///< QUIESCED -> MULTICAST_DETACHED
  kSave = 6,             ///< -> SAVED: carrier D2H of every tracked creator allocation
  kRelease = 7,          ///< -> RELEASED: unmap tracked mappings (VA kept), release handles
  kReallocate = 8,       ///< -> REALLOCATED: fresh allocations at the same VAs, carrier H2D
  kImport = 9,           ///< -> IMPORTED: importers fetch fresh descriptors and map
  kMulticastCreate = 10,
  kMulticastImport = 11,
  kMulticastJoin = 12,   ///< add devices (barrier: binds wait for the whole team)
  kMulticastBind = 13,   ///< bind + map multicast; -> ACTIVE when done
  kResume = 14,          ///< QUIESCED (nothing destroyed yet) -> ACTIVE: a refused checkpoint
  kActivate = 15,        ///< after restore's comparison: -> ACTIVE, application calls resume
};

/// Shim lifecycle phases (DESIGN.md, "Lifecycle").
enum class Phase : uint32_t {
  kActive = 1,
  kQuiesced = 2,
  kMulticastDetached = 3,
  kSaved = 4,
  kReleased = 5,
  kReallocated = 6,
  kImported = 7,
  kMulticastCreated = 8,
  kMulticastImported = 9,
  kMulticastJoined = 10,
  kFailed = 11,
  kRestored = 12,
};

/// Header flags.
inline constexpr uint32_t kMore = 1u << 0;  ///< more packets of this reply follow

/// Fixed-size message header (256 bytes). Requests set op and args; replies echo op, set
/// status (0 ok, otherwise a CUresult or errno-style code) and text on failure.
struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  int32_t status;
  uint32_t flags;
  uint32_t count;       ///< Records that follow in this packet
  uint32_t phase;       ///< replies: the shim's Phase after the request
  uint64_t arg[6];      ///< op-specific: kExport {creator pid, creator start, allocation id,
                        ///<   kind}; replies to kIdentify {pid, start time, records,
                        ///<   untracked imports (live allocations), tracked bytes,
                        ///<   PackCreateCounts(...)}, followed by kUntrackedImport records;
                        ///<   carrier replies {bytes, ns}
                        ///<   kExport replies echo the request's args and add the
                        ///<   object's size in bytes as arg[4]
  char text[184];       ///< NUL-terminated error text naming the process and resource
};
static_assert(sizeof(Header) == 256);

/// kIdentify's arg[5]: tracked cuMemCreate calls over the process's life (low 32 bits) and
/// how many of them were host (HOST_NUMA) allocations (high 32 bits).
constexpr uint64_t PackCreateCounts(uint32_t total, uint32_t host_numa) {
  return (uint64_t{host_numa} << 32) | total;
}
constexpr uint32_t CreatedTotal(uint64_t packed) { return static_cast<uint32_t>(packed); }
constexpr uint32_t CreatedHostNuma(uint64_t packed) { return static_cast<uint32_t>(packed >> 32); }

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

/// kIdentify describes at most this many untracked imports (all their mappings each); the
/// count in arg[3] says how many are live.
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

inline constexpr size_t kMaxPacket = 64 * 1024;
inline constexpr size_t kMaxRecordsPerMessage = (kMaxPacket - sizeof(Header)) / sizeof(Record);

}  // namespace cusnap::proto
