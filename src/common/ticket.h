// Tickets: what cuMemExportToShareableHandle(POSIX_FILE_DESCRIPTOR) returns for a tracked
// allocation instead of the raw CUDA descriptor (DESIGN.md, "Tickets"). A ticket is a small
// sealed memfd naming the creator process (pid + start time), the allocation (or multicast
// object) id and the kind; it carries no CUDA state, so it stays valid across checkpoint and
// restore and can travel any way a descriptor can (SCM_RIGHTS, fork, pidfd_getfd).
#pragma once

#include <cstdint>
#include <optional>

#include "common/error.h"
#include "common/protocol.h"

namespace cusnap {

/// What a ticket names.
enum class TicketKind : uint32_t { kUnicast = 1, kMulticast = 2 };

/// What a multicast ticket also carries: the object's requested properties
/// (CUmulticastObjectProp), so an importer records them without asking the creator. All zero
/// in a unicast ticket.
struct TicketMulticastProperties {
  uint64_t size = 0;          ///< bytes, as requested
  uint64_t handle_types = 0;  ///< CUmemAllocationHandleType bits
  uint64_t flags = 0;
  uint32_t num_devices = 0;
};

struct Ticket {
  proto::ObjectId id{};  ///< creator pid + start time + local id (id.reserved is zero)
  TicketKind kind = TicketKind::kUnicast;
  proto::Capability capability{};  ///< the creator's secret for this object (capabilities.h)
  TicketMulticastProperties multicast;  ///< kMulticast only
};

/// The on-memfd layout, little-endian, exactly kTicketSize bytes, zero-filled.
struct TicketLayout {
  uint32_t magic;      ///< kTicketMagic
  uint16_t version;    ///< kTicketVersion
  uint16_t kind;       ///< TicketKind
  int32_t creator_pid;
  uint32_t reserved0;
  uint64_t creator_start;
  uint64_t local_id;
  uint64_t mc_size;          ///< kMulticast: TicketMulticastProperties (zero for kUnicast)
  uint64_t mc_handle_types;
  uint64_t mc_flags;
  uint32_t mc_num_devices;
  uint32_t reserved1;
  uint64_t capability[2];    ///< version 2: proto::Capability; never all zero
};
inline constexpr uint32_t kTicketMagic = 0x544b5343;  // "CSKT"
/// Version 2 added the capability: a version-1 ticket (64 bytes) is refused by its version.
inline constexpr uint16_t kTicketVersion = 2;
inline constexpr size_t kTicketSize = 80;
static_assert(sizeof(TicketLayout) == kTicketSize);

/// The seals every ticket carries, exactly (memfd_create(2), fcntl(2) F_ADD_SEALS).
int TicketSeals();

/// Creates a ticket memfd (MFD_CLOEXEC | MFD_ALLOW_SEALING, sealed with TicketSeals()).
/// Returns the descriptor (the caller owns it) or an errno-coded Error.
Result<int> CreateTicket(const Ticket& ticket);

/// Reads the ticket behind `fd` without moving its file offset (pread). Returns nullopt
/// when `fd` is not a ticket (not a sealed memfd of kTicketSize bytes with the magic: e.g.
/// a real CUDA descriptor), the ticket when it is valid, and an Error (code -1) when it has
/// a ticket's seals and magic but a bad version (size 64: version 1), kind, pid, reserved
/// field or an all-zero capability, or a unicast ticket with multicast properties.
Result<std::optional<Ticket>> ReadTicket(int fd);

}  // namespace cusnap
