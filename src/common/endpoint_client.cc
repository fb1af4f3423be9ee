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

Result<proto::Message> Request(const std::string& socket_path, const proto::Message& request,
                               int timeout_ms) {
  const Deadline deadline = Deadline::AfterMs(timeout_ms);
  Result<UniqueFd> fd = ConnectSeqpacket(socket_path, deadline);
  if (!fd.ok()) return fd.error();
  Status sent = SendMessage(fd->get(), request, deadline);
  if (!sent.ok()) return Error{sent.error().code, socket_path + ": " + sent.error().message};
  Result<proto::Message> reply = ReceiveMessage(fd->get(), deadline);
  if (!reply.ok()) return Error{reply.error().code, socket_path + ": " + reply.error().message};
  return reply;
}

Result<proto::ExportReply> RequestExport(const proto::ObjectId& id, uint32_t kind, int timeout_ms) {
  Result<proto::ExportReply> reply =
      Request<proto::ExportReply>(EndpointPath(ControlDir(), id.creator_pid),
                                  proto::ExportRequest{id, kind}.Encode(), timeout_ms);
  if (!reply.ok()) {
    return Error{reply.error().code,
                 "asking for " + DescribeObject(id) + ": " + reply.error().message};
  }
  // The reply must answer the request that was sent (SPEC-REFERENCE H.2).
  if (!reply->fd.valid() || !(reply->id == id) || reply->kind != kind) {
    return Error{EPROTO, "the creator's reply carries no descriptor for " + DescribeObject(id)};
  }
  return reply;
}

}  // namespace cusnap
