#include "shim/endpoint/endpoint.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/log.h"
#include "shim/endpoint/control.h"
#include "shim/intercept/cuda_abi.h"
#include "shim/process.h"

namespace cusnap::shim {
namespace {

// Creates `dir` and any missing parent with mode 0700.
Status MakeControlDir(const std::string& dir) {
  for (size_t slash = 1; slash <= dir.size(); ++slash) {
    if (slash != dir.size() && dir[slash] != '/') continue;
    const std::string part = dir.substr(0, slash);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return Error{errno, "cannot create control directory " + part + ": " + std::strerror(errno)};
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error{ENOTDIR, "control directory " + dir + " is not a directory"};
  }
  return Ok{};
}

// Parses "<pid>.sock"; 0 when the name is something else.
int SocketPid(const char* name) {
  int pid = 0;
  const char* p = name;
  for (; *p >= '0' && *p <= '9'; ++p) {
    if (pid > 100'000'000) return 0;
    pid = pid * 10 + (*p - '0');
  }
  return p != name && std::strcmp(p, ".sock") == 0 ? pid : 0;
}

// Short-lived helpers that load the shim leave sockets behind when they are killed: remove
// those of processes that no longer exist (SPEC-REFERENCE E.5).
void RemoveDeadSockets(const std::string& dir, int self) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* entry = readdir(d)) {
    const int pid = SocketPid(entry->d_name);
    if (pid == 0 || pid == self) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      unlinkat(dirfd(d), entry->d_name, 0);
    }
  }
  closedir(d);
}

// Starts `main` on a thread with every signal blocked (the application's handlers must not
// run on the shim's threads), detached.
bool StartThread(void* (*main)(void*), void* arg, const char* name) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  const int rc = pthread_create(&thread, nullptr, main, arg);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) return false;
  pthread_setname_np(thread, name);
  pthread_detach(thread);
  return true;
}

}  // namespace

Result<Endpoint*> Endpoint::Start(const std::string& control_dir) {
  Status dir = MakeControlDir(control_dir);
  if (!dir.ok()) return dir.error();
  const ProcessIdentity self = SelfIdentity();
  const std::string path = EndpointPath(control_dir, self.pid);
  RemoveDeadSockets(control_dir, self.pid);

  // A socket at our own path belongs to a process that had our pid before (it exited, or
  // exec'd and its listener closed): replace it, unless something still answers there.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    Result<int> probe = ConnectSeqpacket(path, Deadline::AfterMs(100));
    if (probe.ok()) {
      close(*probe);
      return Error{EADDRINUSE, "endpoint " + path + " is served by another process"};
    }
    unlink(path.c_str());
  }
  Result<int> listener = ListenSeqpacket(path, 16);
  if (!listener.ok()) return listener.error();

  auto* endpoint = new Endpoint();
  endpoint->path_ = path;
  endpoint->owner_pid_ = self.pid;
  endpoint->listener_ = *listener;
  if (!StartThread(&Endpoint::PeerMain, endpoint, "cusnap-peer") ||
      !StartThread(&Endpoint::ControlMain, endpoint, "cusnap-control")) {
    // A thread that did start keeps polling a closed descriptor harmlessly until exit; the
    // object is leaked on purpose so it never reads freed memory.
    close(endpoint->listener_);
    unlink(path.c_str());
    return Error{EAGAIN, "cannot start the endpoint threads for " + path};
  }
  CUSNAP_LOG_INFO("endpoint listening at %s", path.c_str());
  return endpoint;
}

void Endpoint::AbandonAfterFork() {
  if (listener_ >= 0) close(listener_);
  listener_ = -1;
}

void Endpoint::Unlink() {
  if (owner_pid_ == static_cast<int>(getpid()) && !path_.empty()) unlink(path_.c_str());
}

void* Endpoint::PeerMain(void* arg) {
  auto* self = static_cast<Endpoint*>(arg);
  for (;;) {
    // Bounded waits: an idle endpoint wakes once a minute and goes back to waiting.
    Result<int> fd = AcceptConnection(self->listener_, Deadline::AfterMs(60'000));
    if (fd.ok()) {
      self->ServeConnection(*fd);
    } else if (fd.error().code != ETIMEDOUT) {
      CUSNAP_LOG_WARN("endpoint %s: %s", self->path_.c_str(), fd.error().message.c_str());
      if (fd.error().code == EBADF) return nullptr;
      poll(nullptr, 0, 100);  // e.g. EMFILE: do not spin
    }
  }
}

void Endpoint::ServeConnection(int fd) {
  Status peer = CheckPeerCredentials(fd);
  if (!peer.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: %s", path_.c_str(), peer.error().message.c_str());
    close(fd);
    return;
  }
  Result<Message> request = ReceiveMessage(fd, Deadline::AfterMs(kRequestTimeoutMs));
  if (!request.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: bad request: %s", path_.c_str(), request.error().message.c_str());
    close(fd);
    return;
  }
  if (request->fd >= 0) {  // no request carries a descriptor
    close(request->fd);
    request->fd = -1;
  }
  if (request->header.op == static_cast<uint16_t>(proto::Op::kExport)) {
    ServeExport(fd, request->header);
    close(fd);
    return;
  }
  Enqueue(fd, std::move(*request));
}

void Endpoint::ServeExport(int fd, const proto::Header& request) {
  const ProcessIdentity self = SelfIdentity();
  proto::Header reply = MakeHeader(proto::Op::kExport);
  std::memcpy(reply.arg, request.arg, sizeof reply.arg);
  proto::ObjectId id{};
  id.creator_pid = static_cast<int32_t>(request.arg[0]);
  id.creator_start = request.arg[1];
  id.local_id = request.arg[2];
  const auto kind = static_cast<TicketKind>(request.arg[3]);
  int export_fd = -1;
  if (!CreatedBy(id, self)) {
    reply.status = CUDA_ERROR_INVALID_HANDLE;
    SetHeaderText(reply, "pid " + std::to_string(self.pid) + " (start " +
                             std::to_string(self.start_time) + ") did not create " +
                             DescribeObject(id));
  } else {
    uint64_t size = 0;
    export_fd = export_cache().Dup(kind, id.local_id, &size);
    if (export_fd < 0) {
      reply.status = CUDA_ERROR_INVALID_HANDLE;
      SetHeaderText(reply, "pid " + std::to_string(self.pid) + ": " + DescribeObject(id) +
                               " is not exported (released, or never exported)");
    } else {
      reply.arg[4] = size;
    }
  }
  Status sent = SendMessage(fd, reply, {}, export_fd, Deadline::AfterMs(kRequestTimeoutMs));
  if (!sent.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: export reply: %s", path_.c_str(), sent.error().message.c_str());
  }
  if (export_fd >= 0) close(export_fd);
}

void Endpoint::Enqueue(int fd, Message request) {
  {
    std::lock_guard lock(queue_mutex_);
    if (queue_.size() < kControlQueueLimit) {
      queue_.push_back(Pending{fd, std::move(request)});
      queue_changed_.notify_one();
      return;
    }
  }
  proto::Header reply = request.header;
  reply.status = -1;
  reply.count = 0;
  reply.flags = 0;
  SetHeaderText(reply, "pid " + std::to_string(SelfIdentity().pid) +
                           ": control queue full, request refused (nothing changed)");
  SendMessage(fd, reply, {}, -1, Deadline::AfterMs(kRequestTimeoutMs));
  close(fd);
}

void* Endpoint::ControlMain(void* arg) {
  auto* self = static_cast<Endpoint*>(arg);
  for (;;) {
    Pending next;
    {
      std::unique_lock lock(self->queue_mutex_);
      while (self->queue_.empty()) {
        self->queue_changed_.wait_for(lock, std::chrono::seconds(60));
      }
      next = std::move(self->queue_.front());
      self->queue_.pop_front();
    }
    ControlReply reply = HandleControlRequest(next.request.header, next.request.records);
    Status sent = SendMessage(next.fd, reply.header, reply.records, -1,
                              Deadline::AfterMs(kReplyTimeoutMs));
    if (!sent.ok()) {
      CUSNAP_LOG_WARN("endpoint %s: reply to op %u: %s", self->path_.c_str(),
                      static_cast<unsigned>(next.request.header.op), sent.error().message.c_str());
    }
    close(next.fd);
  }
}

}  // namespace cusnap::shim
