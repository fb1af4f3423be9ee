#include "shim/endpoint/endpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/control_dir.h"
#include "common/endpoint_client.h"
#include "common/ids.h"
#include "common/log.h"
#include "common/socket.h"
#include "common/text.h"
#include "shim/endpoint/control.h"
#include "shim/driver/cuda_abi.h"
#include "shim/quiet_thread.h"
#include "shim/tables/capabilities.h"

namespace cusnap::shim {
namespace {

// The peer's credentials on a Unix socket (pid 0 when the socket gives none).
ucred PeerCredentials(int connection) {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) peer = ucred{};
  return peer;
}

// Short-lived helpers that load the shim leave sockets behind when they are killed: remove
// those of processes that no longer exist (SPEC-REFERENCE E.5).
// Works on the directory checked by MakeControlDir (its descriptor), never on its path again.
void RemoveDeadSockets(int dir_fd, int self) {
  const int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return;
  }
  while (dirent* entry = readdir(d)) {
    const int pid = EndpointPidOfPath(entry->d_name);
    if (pid == 0 || pid == self) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      unlinkat(dirfd(d), entry->d_name, 0);
    }
  }
  closedir(d);
}

// A connection thread's stack (bytes): it decodes one message and answers it. The default
// (8 MiB, RLIMIT_STACK) would be reserved per connection from an application's address
// space, which may be tight (RLIMIT_AS; CliJobRefusal.AddressSpaceTooSmallForTheCarrier).
constexpr size_t kConnectionStackBytes = 512 * 1024;

// How long Start waits for its two threads to run (ms): their start takes microseconds; a
// machine too loaded to schedule them in this time gets the endpoint anyway.
constexpr int kThreadsRunningTimeoutMs = 2'000;

}  // namespace

bool Endpoint::StartThread(ThreadStart* start, size_t stack_bytes) {
  pthread_t thread;
  if (!StartQuietThread(&thread, &Endpoint::RunThread, start, stack_bytes)) {
    delete start;
    return false;
  }
  pthread_detach(thread);
  return true;
}

void* Endpoint::RunThread(void* arg) {
  const ThreadStart start = *static_cast<ThreadStart*>(arg);
  delete static_cast<ThreadStart*>(arg);
  pthread_setname_np(pthread_self(), start.name);
  if (Endpoint* counted = start.counted) {
    std::lock_guard lock(counted->running_mutex_);
    ++counted->running_;
    counted->running_changed_.notify_all();
  }
  return start.main(start.arg);
}

bool Endpoint::AwaitRunning(int count, int timeout_ms) {
  std::unique_lock lock(running_mutex_);
  return running_changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                   [&] { return running_ >= count; });
}

Result<Endpoint*> Endpoint::Start(const std::string& control_dir, ServedProcess& served) {
  // Not ours, not 0700, or a symbolic link: no endpoint there (control_dir.h).
  Result<UniqueFd> dir = MakeControlDir(control_dir);
  if (!dir.ok()) return dir.error();
  const ProcessIdentity self = SelfIdentity();
  const std::string path = EndpointPath(control_dir, self.pid);
  const std::string name = std::to_string(self.pid) + ".sock";
  RemoveDeadSockets(dir->get(), self.pid);

  // A socket at our own path belongs to a process that had our pid before (it exited, or
  // exec'd and its listener closed): replace it, unless something still answers there.
  struct stat st;
  if (fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (ConnectSeqpacket(path, Deadline::AfterMs(100)).ok()) {
      return Error{EADDRINUSE, "endpoint " + path + " is served by another process"};
    }
    unlinkat(dir->get(), name.c_str(), 0);
  }
  Result<UniqueFd> listener = ListenSeqpacket(path, 16);
  if (!listener.ok()) return listener.error();

  auto* endpoint = new Endpoint(served);
  endpoint->path_ = path;
  endpoint->owner_pid_ = self.pid;
  endpoint->listener_ = std::move(*listener);
  if (!StartThread(new ThreadStart{&Endpoint::PeerMain, endpoint, "cusnap-peer", endpoint}) ||
      !StartThread(new ThreadStart{&Endpoint::ControlMain, endpoint, "cusnap-control", endpoint})) {
    // A thread that did start keeps polling a closed descriptor harmlessly until exit; the
    // object is leaked on purpose so it never reads freed memory.
    endpoint->listener_.reset();
    unlink(path.c_str());
    return Error{EAGAIN, "cannot start the endpoint threads for " + path};
  }
  if (!endpoint->AwaitRunning(2, kThreadsRunningTimeoutMs)) {
    CUSNAP_LOG_WARN("endpoint %s: its threads did not start within %d ms; going on",
                    path.c_str(), kThreadsRunningTimeoutMs);
  }
  CUSNAP_LOG_INFO("endpoint listening at %s", path.c_str());
  return endpoint;
}

void Endpoint::AbandonAfterFork() { listener_.reset(); }

void Endpoint::Unlink() {
  if (owner_pid_ == static_cast<int>(getpid()) && !path_.empty()) unlink(path_.c_str());
}

void* Endpoint::PeerMain(void* arg) {
  auto* self = static_cast<Endpoint*>(arg);
  for (;;) {
    // Bounded waits: an idle endpoint wakes once a minute and goes back to waiting.
    Result<UniqueFd> connection =
        AcceptConnection(self->listener_.get(), Deadline::AfterMs(60'000));
    if (connection.ok()) {
      self->Dispatch(std::move(*connection));
    } else if (connection.error().code != ETIMEDOUT) {
      CUSNAP_LOG_WARN("endpoint %s: %s", self->path_.c_str(), connection.error().message.c_str());
      if (connection.error().code == EBADF) return nullptr;
      poll(nullptr, 0, 100);  // e.g. EMFILE: do not spin
    }
  }
}

namespace {

struct ConnectionJob {
  Endpoint* endpoint;
  int fd;
};

}  // namespace

void Endpoint::Dispatch(UniqueFd connection) {
  // One thread per connection: a client that connects and sends nothing holds its
  // own thread until kRequestTimeoutMs, never the next client's request.
  if (connections_.fetch_add(1, std::memory_order_acq_rel) >= kMaxConnections) {
    connections_.fetch_sub(1, std::memory_order_acq_rel);
    CUSNAP_LOG_WARN("endpoint %s: %d connections are being served; one more is closed unanswered",
                    path_.c_str(), kMaxConnections);
    return;
  }
  auto* job = new ConnectionJob{this, connection.get()};
  if (!StartThread(new ThreadStart{&Endpoint::ConnectionMain, job, "cusnap-conn", nullptr},
                   kConnectionStackBytes)) {
    delete job;
    connections_.fetch_sub(1, std::memory_order_acq_rel);
    // No thread (address space or thread limit reached): answer on this thread rather than
    // drop a checkpoint's request; an idle client can then delay others by its deadline.
    CUSNAP_LOG_WARN("endpoint %s: cannot start a thread for a connection; serving it on the "
                    "accepting thread", path_.c_str());
    ServeConnection(std::move(connection));
    return;
  }
  (void)connection.release();  // the thread owns it now
}

void* Endpoint::ConnectionMain(void* arg) {
  auto* job = static_cast<ConnectionJob*>(arg);
  Endpoint* self = job->endpoint;
  UniqueFd connection(job->fd);
  delete job;
  self->ServeConnection(std::move(connection));
  self->connections_.fetch_sub(1, std::memory_order_acq_rel);
  return nullptr;
}

void Endpoint::Reply(int connection, const proto::Message& reply, int timeout_ms) {
  Status sent = SendMessage(connection, reply, Deadline::AfterMs(timeout_ms));
  if (!sent.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: reply to %s: %s", path_.c_str(), proto::OpName(reply.op),
                    sent.error().message.c_str());
  }
}

void Endpoint::ServeConnection(UniqueFd connection) {
  Status peer = CheckPeerCredentials(connection.get());
  if (!peer.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: %s", path_.c_str(), peer.error().message.c_str());
    return;
  }
  Result<proto::Message> request =
      ReceiveMessage(connection.get(), Deadline::AfterMs(kRequestTimeoutMs), kMaxRequestBytes);
  if (!request.ok()) {
    CUSNAP_LOG_WARN("endpoint %s: bad request: %s", path_.c_str(), request.error().message.c_str());
    if (request.error().code == EPROTONOSUPPORT) {
      // Answered in this side's version, so the client names both versions (socket.h); the
      // client stops at the version, so the op does not matter.
      Reply(connection.get(), proto::EncodeError(proto::Op::kIdentify, request.error()),
            kRequestTimeoutMs);
    }
    return;
  }
  // Only a carrier step carries a descriptor (its folder, control.cc): a dump's save, write
  // and read of the carrier; any other is closed.
  if (request->op != proto::Op::kSave && request->op != proto::Op::kWriteCarrier &&
      request->op != proto::Op::kReadCarrier) {
    request->fd.reset();
  }
  if (request->op == proto::Op::kExport) {
    ServeExport(connection.get(), *request);
    return;
  }
  if (request->op == proto::Op::kHeldAllocations) {
    ServeHeldAllocations(connection.get(), *request);
    return;
  }
  Enqueue(std::move(connection), std::move(*request));
}

void Endpoint::ServeExport(int connection, const proto::Message& request) {
  const ProcessIdentity self = SelfIdentity();
  Result<proto::ExportRequest> asked = proto::ExportRequest::Decode(request);
  if (!asked.ok()) {
    Reply(connection, proto::EncodeError(proto::Op::kExport, asked.error()), kRequestTimeoutMs);
    return;
  }
  const proto::ObjectId& id = asked->id;
  const auto refuse = [&](const std::string& why) {
    Reply(connection, proto::EncodeError(proto::Op::kExport, Error{CUDA_ERROR_INVALID_HANDLE, why}),
          kRequestTimeoutMs);
  };
  if (!CreatedBy(id, self)) {
    refuse("pid " + std::to_string(self.pid) + " (start " + std::to_string(self.start_time) +
           ") did not create " + DescribeObject(id));
    return;
  }
  const auto kind = static_cast<TicketKind>(asked->kind);
  // The capability, not the guessable id, is what grants the descriptor.
  if (!IsCapabilityOf(asked->capability, kind, id.local_id)) {
    refuse("pid " + std::to_string(self.pid) + ": the request for " + DescribeObject(id) +
           " does not carry its ticket's capability (only a process given a ticket of it "
           "may import it)");
    return;
  }
  proto::ExportReply reply{id, asked->kind, 0, {}};
  reply.fd.reset(served_.export_cache().Dup(kind, id.local_id, &reply.size));
  if (!reply.fd.valid()) {
    refuse("pid " + std::to_string(self.pid) + ": " + DescribeObject(id) +
           " is not exported (released, or never exported)");
    return;
  }
  // Noted before the reply: once the importer holds the descriptor, a checkpoint must see it.
  if (Status noted = NoteImporter(connection, kind, id); !noted) {
    refuse(noted.error().message);
    return;
  }
  Reply(connection, std::move(reply).Encode(), kRequestTimeoutMs);
}

void Endpoint::ServeHeldAllocations(int connection, const proto::Message& request) {
  Result<proto::HeldAllocationsRequest> asked = proto::HeldAllocationsRequest::Decode(request);
  Reply(connection,
        asked.ok() ? proto::HeldAllocationsReply{served_.sharing_table().Held(asked->ids)}.Encode()
                   : proto::EncodeError(proto::Op::kHeldAllocations, asked.error()),
        kRequestTimeoutMs);
}

Status Endpoint::NoteImporter(int connection, TicketKind kind, const proto::ObjectId& id) {
  const ucred peer = PeerCredentials(connection);
  if (peer.pid <= 0 || peer.pid == owner_pid_) {
    return Ok{};  // no credentials (not a Unix socket), or this process fetching its own object
  }
  // No descriptor to read the importer's start time with says nothing of the importer: the
  // export is refused (the import can be tried again), never handed out unnoted.
  Result<uint64_t> start = ProcessStartTimeOrShortage(peer.pid);
  if (!start) {
    return Error{start.error().code,
                 ThisProcess() + ": cannot note " + ProcessText(peer.pid) + " as an importer of " +
                     DescribeObject(id) + " (" + strerror(start.error().code) +
                     "): not exported; try again"};
  }
  // A start time of 0: the importer is gone already, and a gone importer does not count.
  if (*start == 0) return Ok{};
  if (!served_.export_cache().NoteImporter(kind, id.local_id, peer.pid, *start)) {
    CUSNAP_LOG_WARN("endpoint %s: %s has more than %u live importers; pid %d is not "
                    "remembered, and a checkpoint cannot check that it is a participant",
                    path_.c_str(), DescribeObject(id).c_str(), proto::kMaxImportersPerObject,
                    static_cast<int>(peer.pid));
  }
  return Ok{};
}

void Endpoint::Enqueue(UniqueFd connection, proto::Message request) {
  {
    std::lock_guard lock(queue_mutex_);
    if (queue_.size() < kControlQueueLimit) {
      queue_.push_back(Pending{std::move(connection), std::move(request)});
      queue_changed_.notify_one();
      return;
    }
  }
  const Error full{-1, "pid " + std::to_string(SelfIdentity().pid) +
                          ": control queue full, request refused (nothing changed)"};
  Reply(connection.get(), proto::EncodeError(request.op, full), kRequestTimeoutMs);
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
    self->Reply(next.connection.get(), HandleControlRequest(self->served_, next.request),
                kReplyTimeoutMs);
  }
}

}  // namespace cusnap::shim
