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

std::string ControlDirFor(const char* cusnap_control_dir, const char* xdg_runtime_dir,
                          unsigned uid) {
  if (cusnap_control_dir != nullptr && *cusnap_control_dir != '\0') return cusnap_control_dir;
  if (xdg_runtime_dir != nullptr && *xdg_runtime_dir != '\0') {
    return std::string(xdg_runtime_dir) + "/cusnap";
  }
  return "/tmp/cusnap-" + std::to_string(uid);
}

std::string ControlDir() {
  return ControlDirFor(std::getenv("CUSNAP_CONTROL_DIR"), std::getenv("XDG_RUNTIME_DIR"),
                       geteuid());
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
