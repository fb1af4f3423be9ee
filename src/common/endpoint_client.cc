#include "common/endpoint_client.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/ids.h"
#include "common/socket.h"

namespace cusnap {

std::string EndpointPath(const std::string& control_dir, int pid) {
  return control_dir + "/" + std::to_string(pid) + ".sock";
}

std::string ControlDir() {
  if (const char* dir = std::getenv("CUSNAP_CONTROL_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime != '\0') {
    return std::string(runtime) + "/cusnap";
  }
  return "/tmp/cusnap-" + std::to_string(geteuid());
}

Result<Reply> Request(const std::string& socket_path, proto::Header request,
                      std::span<const proto::Record> records, int timeout_ms) {
  const Deadline deadline = Deadline::AfterMs(timeout_ms);
  Result<int> fd = ConnectSeqpacket(socket_path, deadline);
  if (!fd.ok()) return fd.error();
  Status sent = SendMessage(*fd, request, records, -1, deadline);
  if (!sent.ok()) {
    close(*fd);
    return Error{sent.error().code, socket_path + ": " + sent.error().message};
  }
  Result<Message> message = ReceiveMessage(*fd, deadline);
  close(*fd);
  if (!message.ok()) {
    return Error{message.error().code, socket_path + ": " + message.error().message};
  }
  if (message->header.op != request.op) {
    if (message->fd >= 0) close(message->fd);
    return Error{EPROTO, socket_path + ": reply for another operation"};
  }
  if (message->header.status != 0) {
    if (message->fd >= 0) close(message->fd);
    message->header.text[sizeof message->header.text - 1] = '\0';
    return Error{message->header.status, message->header.text};
  }
  Reply reply;
  reply.header = message->header;
  reply.records = std::move(message->records);
  reply.fd = message->fd;
  return reply;
}

Result<Reply> RequestExport(const proto::ObjectId& id, uint32_t kind, int timeout_ms) {
  proto::Header request = MakeHeader(proto::Op::kExport);
  request.arg[0] = static_cast<uint64_t>(static_cast<int64_t>(id.creator_pid));
  request.arg[1] = id.creator_start;
  request.arg[2] = id.local_id;
  request.arg[3] = kind;
  Result<Reply> reply = Request(EndpointPath(ControlDir(), id.creator_pid), request, {}, timeout_ms);
  if (!reply.ok()) {
    return Error{reply.error().code,
                 "asking for " + DescribeObject(id) + ": " + reply.error().message};
  }
  if (reply->fd < 0 || reply->header.arg[2] != id.local_id) {
    if (reply->fd >= 0) close(reply->fd);
    return Error{EPROTO, "the creator's reply carries no descriptor for " + DescribeObject(id)};
  }
  return reply;
}

}  // namespace cusnap
