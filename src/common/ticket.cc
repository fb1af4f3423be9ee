#include "common/ticket.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cusnap {
namespace {

Error SystemError(const char* what) {
  const int code = errno;
  return Error{code, std::string("ticket: ") + what + ": " + std::strerror(code)};
}

}  // namespace

int TicketSeals() { return F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL; }

Result<int> CreateTicket(const Ticket& ticket) {
  TicketLayout layout;
  std::memset(&layout, 0, sizeof layout);
  layout.magic = kTicketMagic;
  layout.version = kTicketVersion;
  layout.kind = static_cast<uint16_t>(ticket.kind);
  layout.creator_pid = ticket.id.creator_pid;
  layout.creator_start = ticket.id.creator_start;
  layout.local_id = ticket.id.local_id;
  layout.capability[0] = ticket.capability.word[0];
  layout.capability[1] = ticket.capability.word[1];
  if (ticket.kind == TicketKind::kMulticast) {
    layout.mc_size = ticket.multicast.size;
    layout.mc_handle_types = ticket.multicast.handle_types;
    layout.mc_flags = ticket.multicast.flags;
    layout.mc_num_devices = ticket.multicast.num_devices;
  }

  const int fd = memfd_create("cusnap-ticket", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return SystemError("memfd_create");
  size_t done = 0;
  const auto* bytes = reinterpret_cast<const char*>(&layout);
  while (done < sizeof layout) {
    const ssize_t n = pwrite(fd, bytes + done, sizeof layout - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error error = SystemError("write");
      close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  if (fcntl(fd, F_ADD_SEALS, TicketSeals()) != 0) {
    Error error = SystemError("seal");
    close(fd);
    return error;
  }
  return fd;
}

Result<std::optional<Ticket>> ReadTicket(int fd) {
  // A real CUDA descriptor (a character device, or the simulated driver's unsealed memfd)
  // fails one of these three checks: that is how tickets are told apart.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals != TicketSeals()) return std::optional<Ticket>{};
  // A version-1 ticket (64 bytes, from an older cusnap) is still told apart from a CUDA
  // descriptor, and then refused by its version.
  constexpr off_t kVersion1Size = 64;
  struct stat st;
  if (fstat(fd, &st) != 0 ||
      (st.st_size != static_cast<off_t>(kTicketSize) && st.st_size != kVersion1Size)) {
    return std::optional<Ticket>{};
  }
  TicketLayout layout;
  std::memset(&layout, 0, sizeof layout);
  const auto size = static_cast<size_t>(st.st_size);
  ssize_t n;
  do {
    n = pread(fd, &layout, size, 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(size)) return SystemError("read");
  if (layout.magic != kTicketMagic) return std::optional<Ticket>{};

  if (layout.version != kTicketVersion || size != kTicketSize) {
    return Error{-1, "ticket: unsupported version " + std::to_string(layout.version) +
                         " (this cusnap reads version " + std::to_string(kTicketVersion) + ")"};
  }
  if (layout.kind != static_cast<uint16_t>(TicketKind::kUnicast) &&
      layout.kind != static_cast<uint16_t>(TicketKind::kMulticast)) {
    return Error{-1, "ticket: unknown kind " + std::to_string(layout.kind)};
  }
  if (layout.creator_pid <= 0 || layout.creator_start == 0 || layout.local_id == 0) {
    return Error{-1, "ticket: names no creator process or object (pid " +
                         std::to_string(layout.creator_pid) + ", object " +
                         std::to_string(layout.local_id) + ")"};
  }
  if (layout.reserved0 != 0 || layout.reserved1 != 0) {
    return Error{-1, "ticket: reserved fields are not zero"};
  }
  if (layout.capability[0] == 0 && layout.capability[1] == 0) {
    return Error{-1, "ticket: carries no capability (its creator never made it)"};
  }
  const bool multicast = layout.kind == static_cast<uint16_t>(TicketKind::kMulticast);
  const bool has_properties = layout.mc_size != 0 || layout.mc_handle_types != 0 ||
                              layout.mc_flags != 0 || layout.mc_num_devices != 0;
  if (!multicast && has_properties) {
    return Error{-1, "ticket: reserved fields are not zero (multicast properties in a unicast ticket)"};
  }

  Ticket ticket;
  ticket.id.creator_pid = layout.creator_pid;
  ticket.id.creator_start = layout.creator_start;
  ticket.id.local_id = layout.local_id;
  ticket.kind = static_cast<TicketKind>(layout.kind);
  ticket.capability = proto::Capability{{layout.capability[0], layout.capability[1]}};
  if (multicast) {
    ticket.multicast.size = layout.mc_size;
    ticket.multicast.handle_types = layout.mc_handle_types;
    ticket.multicast.flags = layout.mc_flags;
    ticket.multicast.num_devices = layout.mc_num_devices;
  }
  return std::optional<Ticket>{ticket};
}

}  // namespace cusnap
