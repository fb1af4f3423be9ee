// libFuzzer target: the ticket parser (ticket.h, ReadTicket) on a memfd holding the
// input, sealed with the ticket's seals when the first byte is even (so both "not a ticket"
// and the full validation are reached). Nothing may crash or accept a malformed ticket.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/ticket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool seal = (data[0] & 1) == 0;
  ++data;
  --size;
  const int fd = memfd_create("fuzz-ticket", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return 0;
  if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  if (seal) fcntl(fd, F_ADD_SEALS, cusnap::TicketSeals());
  auto ticket = cusnap::ReadTicket(fd);
  if (ticket.ok() && ticket->has_value()) {
    const cusnap::Ticket& t = **ticket;
    // A ticket accepted is one the parser's rules allow.
    if (t.id.creator_pid <= 0 || t.id.local_id == 0 || t.id.creator_start == 0) std::abort();
    if (t.kind != cusnap::TicketKind::kUnicast && t.kind != cusnap::TicketKind::kMulticast) std::abort();
    if (t.capability.word[0] == 0 && t.capability.word[1] == 0) std::abort();
  }
  close(fd);
  return 0;
}
