// libFuzzer target: the endpoint protocol's decoder as a peer meets it. The input
// is split into packets (each led by a 2-byte little-endian length), sent over a
// SOCK_SEQPACKET pair and read back with ReceiveMessage (framing, version, continuation and
// size checks), and every message that comes through is decoded as every request and reply
// (messages.h). Nothing may crash, hang, leak a descriptor or read out of bounds.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/messages.h"
#include "common/socket.h"

namespace {

void DecodeEveryWay(cusnap::proto::Message& message) {
  using namespace cusnap::proto;
  (void)ExportRequest::Decode(message);
  (void)IdentifyReply::Decode(message);
  (void)InspectReply::Decode(message);
  (void)ResourcesRequest::Decode(message);
  (void)ResourcesReply::Decode(message);
  (void)StepRequest::Decode(message);
  (void)StepReply::Decode(message, message.op);
  (void)ExportReply::Decode(message);  // last: it takes the descriptor
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) != 0) return 0;
  size_t at = 0;
  int packets = 0;
  while (at + 2 <= size && packets < 64) {
    const size_t length = std::min<size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
    at += 2;
    if (send(fds[1], data + at, length, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) break;
    at += length;
    ++packets;
  }
  close(fds[1]);  // the peer goes away: a missing continuation ends in ECONNRESET, not a wait
  for (int i = 0; i < 4; ++i) {
    auto message = cusnap::ReceiveMessage(fds[0], cusnap::Deadline::AfterMs(50));
    if (!message.ok()) break;
    DecodeEveryWay(*message);
  }
  close(fds[0]);
  // The payload alone, under every op, without the socket.
  cusnap::proto::Message direct;
  direct.payload.assign(reinterpret_cast<const char*>(data), size);
  for (uint16_t op = 0; op < 20; ++op) {
    direct.op = static_cast<cusnap::proto::Op>(op);
    DecodeEveryWay(direct);
  }
  return 0;
}
