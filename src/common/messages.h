// The endpoint protocol's messages: one struct per request and per reply, each with its
// encoding and decoding side by side (as CRIU's dump and restore share images/*.proto), so
// the shim and its clients name every field and neither packs nor reads by position.
// protocol.h has the ops, the shim's states, the framing and the Record; wire_codec.h the
// payload layout; socket.h sends and receives a Message.
//
// A request's payload is its fields. A reply's payload starts with its status: 0, then the
// reply's fields; otherwise the status (a CUresult, an errno, or -1 for a refusal) and the
// error text, whole, of any length (it names the process and the resource).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/protocol.h"
#include "common/unique_fd.h"

namespace cusnap::proto {

/// One message as it travels: the op (a reply echoes its request's), the payload, and the
/// descriptor that came with it (kExport replies only; the holder owns it).
struct Message {
  Op op = Op::kIdentify;
  std::string payload;
  UniqueFd fd;
};

/// An error reply to `op`: status error.code (-1 when it is 0) and its message, whole.
Message EncodeError(Op op, const Error& error);

// ---- kExport (served by the peer thread) -------------------------------------------------

/// Asks a creator for a fresh raw POSIX descriptor of one of its objects.
struct ExportRequest {
  ObjectId id{};      ///< the object, named by its creator's identity
  uint32_t kind = 0;  ///< TicketKind: 1 unicast allocation, 2 multicast object
  Capability capability{};  ///< from the ticket: the creator serves only the right one
  Message Encode() const;
  /// EPROTO when the payload is not an export request.
  static Result<ExportRequest> Decode(const Message& message);
};

/// The creator's answer: the request's object echoed, its size, and the descriptor.
struct ExportReply {
  ObjectId id{};
  uint32_t kind = 0;
  uint64_t size = 0;  ///< the object's size in bytes
  UniqueFd fd;        ///< travels as SCM_RIGHTS
  Message Encode() &&;
  /// Takes the descriptor out of `message`. An error reply comes back as its Error; EPROTO
  /// when the payload is malformed or answers another op.
  static Result<ExportReply> Decode(Message& message);
};

// ---- kHeldAllocations (served by the peer thread, read-only) -----------------------------

/// Asks a process which of these allocations (named by their creator's identity) it holds a
/// driver handle of.
struct HeldAllocationsRequest {
  std::vector<ObjectId> ids;
  Message Encode() const;
  /// EPROTO when the payload is not such a request.
  static Result<HeldAllocationsRequest> Decode(const Message& message);
};

/// Those of the request's allocations the process holds a driver handle of (an import not
/// released, or its own allocation), in the request's order.
struct HeldAllocationsReply {
  std::vector<ObjectId> held;
  Message Encode() const;
  /// An error reply comes back as its Error; EPROTO when malformed or for another op.
  static Result<HeldAllocationsReply> Decode(const Message& message);
};

// ---- kIdentify and kInspect (control thread, read-only) ---------------------------------

struct IdentifyRequest {
  Message Encode() const;
};

/// Who the endpoint belongs to and what its shim holds.
struct IdentifyReply {
  int32_t pid = 0;
  uint64_t start_time = 0;                 ///< clock ticks since boot
  ShimState state = ShimState::kActive;
  uint64_t records = 0;                    ///< records INSPECT would return
  uint64_t untracked_imports = 0;          ///< live imports of descriptors that were not tickets
  uint64_t tracked_bytes = 0;              ///< bytes of tracked allocations this process created
  uint32_t created_total = 0;              ///< tracked cuMemCreate calls over the process's life
  uint32_t created_host_numa = 0;          ///< of which HOST_NUMA
  /// Why the last lifecycle step failed, or why the lease rolled the shim back ("" when the
  /// last step succeeded); the state says where the shim stands (a failed step keeps it).
  std::string failure;
  /// The checkpoint whose bytes the shim holds (StepRequest::checkpoint_id of its last
  /// kSave), until kResume or kActivate ends it; "" when it holds none.
  std::string checkpoint_id;
  /// The untracked imports as kUntrackedImport records (at most kMaxUntrackedReported
  /// imports, every mapping of each).
  std::vector<Record> untracked;
  /// The entry points this process used whose memory cusnap cannot carry (managed memory,
  /// shared memory pools, dma-buf, legacy IPC handles from outside cusnap), one per line in
  /// the order first used; "" when none (the checkpoint refuses it by name).
  std::string unsupported;
  /// The settings the shim read whose values it did not take, one line each with the
  /// default it used (common/settings.h); "" when none.
  std::string settings;
  Message Encode() const;
  /// An error reply comes back as its Error; EPROTO when malformed or for another op.
  static Result<IdentifyReply> Decode(const Message& message);
};

struct InspectRequest {
  Message Encode() const;
};

/// The sharing table, then the multicast table, as Records; and the live processes that
/// fetched a descriptor of an object this process created (kExport), one entry per (object,
/// process).
struct InspectReply {
  std::vector<Record> records;
  std::vector<Importer> importers;
  /// This process's devices in its own ordinal order (CUDA_VISIBLE_DEVICES and
  /// CUDA_DEVICE_ORDER applied by its driver), each as FormatGpuUuid writes it, joined by ',':
  /// what the ordinals in `records` name now ("" when the driver reported none).
  std::string device_uuids;
  Message Encode() const;
  /// An error reply comes back as its Error; EPROTO when malformed or for another op.
  static Result<InspectReply> Decode(const Message& message);
};

// ---- kCheckResources (control thread, read-only) ---------------------------------------

/// What the rest of the checkpoint and the restore will need of one participant.
struct ResourcesRequest {
  uint64_t carrier_bytes = 0;  ///< host bytes the carrier will hold (its created allocations)
  uint64_t imports = 0;        ///< descriptors the restore's imports will fetch at once
  Message Encode() const;
  /// EPROTO when the payload is malformed.
  static Result<ResourcesRequest> Decode(const Message& message);
};

/// What the participant has (kUnlimited: no limit applies). A shortfall is an error reply
/// (status -1) naming the process, the resource, what is needed and what is available.
struct ResourcesReply {
  static constexpr uint64_t kUnlimited = UINT64_MAX;
  uint64_t descriptors_free = kUnlimited;    ///< RLIMIT_NOFILE (soft) minus open descriptors
  uint64_t cgroup_memory_free = kUnlimited;  ///< least memory.max - memory.current up the cgroup
  uint64_t address_space_free = kUnlimited;  ///< RLIMIT_AS (soft) minus the address space's size
  /// Host memory the carrier's arena holds now, bytes (kept from an earlier cycle; 0 before
  /// the first): part of the process's resident memory that a dump writes to carrier files
  /// and gives back before CRIU runs, so no CRIU image carries it.
  uint64_t carrier_held = 0;
  Message Encode() const;
  /// An error reply comes back as its Error; EPROTO when malformed or for another op.
  static Result<ResourcesReply> Decode(const Message& message);
};

// ---- Lifecycle steps (kQuiesce .. kActivate, control thread) ---------------------------

/// One lifecycle step.
struct StepRequest {
  Op op = Op::kQuiesce;
  /// kQuiesce: how long to wait for tracked calls in flight, in ms (0: the shim's default).
  uint64_t drain_ms = 0;
  /// kSave: the id of this checkpoint (the state file records it too), kept by the shim so
  /// that a restore can refuse a state file of another checkpoint; "" for other ops.
  std::string checkpoint_id;
  /// The command's lease in ms: the shim rolls back by itself (QUIESCED or SAVED, before
  /// kCommit) when no request came for this long after the last one ended; 0: no lease
  /// (the state is held until a request moves it).
  uint64_t lease_ms = 0;
  /// kMulticastCreate .. kMulticastBind (recover): multicast objects whose team lost a
  /// member; the shim drops its part of each instead of rebuilding it.
  std::vector<ObjectId> dropped_multicast{};
  /// kReallocate of a restore onto other GPUs: the device map the native restore applied, as
  /// "GPU-<old>=GPU-<new>" UUID pairs joined by ','; "" otherwise. The shim checks that each
  /// of its ordinals now names the GPU its old GPU was moved to before it rebuilds on them.
  std::string device_map{};
  /// kRelease: the command holds this process stopped once it is checkpointed (CUSNAP_HOLD=
  /// stop, coordinator/participants/hold.h). From then until kActivate the shim stops itself again
  /// whenever it runs for a lease with no command at work (a restore that continued it was
  /// killed), so that the job stays held (shim/lifecycle/lifecycle.h).
  bool held = false;
  /// kWriteCarrier, and kSave of a dump: "<stem>": the carrier's bytes go to part files
  /// "<stem>-<k>.bin" in the folder whose descriptor comes with the request (SCM_RIGHTS; a
  /// save streams them there from the device, the write then only gives the arena back). kReadCarrier: "", the
  /// folder that holds them now coming the same way (an images directory may have moved).
  /// Without a descriptor, absolute paths: "<dir>/<stem>" and the folder. "" for other ops.
  std::string carrier_path{};
  Message Encode() const;
  /// EPROTO when the payload is malformed.
  static Result<StepRequest> Decode(const Message& message);
};

/// What a step did: the shim's state after it, and for the carrier steps (kSave,
/// kReallocate; kWriteCarrier and kReadCarrier: the file's bytes and I/O time) the bytes
/// carried, the time of the copies, and the bytes of all-zero chunks
/// among them (not copied: recreated with a memset).
/// A carrier part file kWriteCarrier wrote: its name in the folder, its size, and the
/// digest of every chunk written (ranges no chunk covers are holes: zeros).
struct CarrierFile {
  std::string name;
  uint64_t bytes = 0;
  std::vector<CarrierChunk> chunks;
};

struct StepReply {
  ShimState state = ShimState::kActive;
  uint64_t bytes = 0;
  uint64_t copy_ns = 0;
  uint64_t zero_bytes = 0;
  /// kWriteCarrier: the part files written (empty for other ops).
  std::vector<CarrierFile> files{};
  Message Encode(Op op) const;
  /// An error reply comes back as its Error; EPROTO when malformed or not an answer to `op`.
  static Result<StepReply> Decode(const Message& message, Op op);
};

}  // namespace cusnap::proto
