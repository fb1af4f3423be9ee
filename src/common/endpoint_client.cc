#include "common/endpoint_client.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/control_dir.h"
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
  // As its plain components: "dir/" must name the directory checked, not a link's target.
  return LexicalControlPath(ControlDirFor(std::getenv("CUSNAP_CONTROL_DIR"),
                                          std::getenv("XDG_RUNTIME_DIR"), geteuid()));
}

int EndpointPidOfPath(const std::string& socket_path) {
  const size_t slash = socket_path.rfind('/');
  const std::string name = socket_path.substr(slash == std::string::npos ? 0 : slash + 1);
  int pid = 0;
  size_t at = 0;
  for (; at < name.size() && name[at] >= '0' && name[at] <= '9'; ++at) {
    if (pid > 100'000'000) return 0;
    pid = pid * 10 + (name[at] - '0');
  }
  return at > 0 && name.compare(at, std::string::npos, ".sock") == 0 ? pid : 0;
}

Result<proto::Message> Request(const std::string& socket_path, const proto::Message& request,
                               int timeout_ms,
                               const std::function<std::string()>& still_waiting) {
  const Deadline deadline = Deadline::AfterMs(timeout_ms);
  // Whoever owns the directory decides who answers: refuse one that is not ours and private
  // (control_dir.h), then check that the process answering is the endpoint's own.
  const size_t slash = socket_path.rfind('/');
  Result<UniqueFd> dir = OpenControlDir(slash == std::string::npos ? "."
                                        : slash == 0 ? "/" : socket_path.substr(0, slash));
  if (!dir.ok()) return Error{dir.error().code, socket_path + ": " + dir.error().message};
  Result<UniqueFd> fd = ConnectSeqpacket(socket_path, deadline);
  if (!fd.ok()) return fd.error();
  Status peer = CheckPeerCredentials(fd->get(), EndpointPidOfPath(socket_path));
  if (!peer.ok()) return Error{peer.error().code, socket_path + ": " + peer.error().message};
  Status sent = SendMessage(fd->get(), request, deadline);
  if (!sent.ok()) return Error{sent.error().code, socket_path + ": " + sent.error().message};
  if (still_waiting) {
    // Only the wait for the reply's first packet is sliced: nothing of it is read before.
    for (;;) {
      const int left = deadline.RemainingMs();
      pollfd ready{fd->get(), POLLIN, 0};
      const int n = ::poll(&ready, 1, left < kReplyCheckMs ? left : kReplyCheckMs);
      if (n < 0 && errno == EINTR) continue;
      if (n != 0 || left <= kReplyCheckMs) break;  // readable, closed, or the deadline
      if (std::string why = still_waiting(); !why.empty()) {
        return Error{EHOSTDOWN, socket_path + ": " + why};
      }
    }
  }
  Result<proto::Message> reply = ReceiveMessage(fd->get(), deadline);
  if (!reply.ok()) return Error{reply.error().code, socket_path + ": " + reply.error().message};
  return reply;
}

Result<proto::ExportReply> RequestExport(const proto::ObjectId& id, uint32_t kind,
                                         const proto::Capability& capability, int timeout_ms) {
  Result<proto::ExportReply> reply =
      Request<proto::ExportReply>(EndpointPath(ControlDir(), id.creator_pid),
                                  proto::ExportRequest{id, kind, capability}.Encode(), timeout_ms);
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
