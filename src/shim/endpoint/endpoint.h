// The process's control endpoint (DESIGN.md, "Endpoint"): a SOCK_SEQPACKET Unix socket
// <control dir>/<pid>.sock, mode 0600 in a 0700 directory, peers checked by SO_PEERCRED
// (same uid or root). Two threads, with every signal blocked so the application's handlers
// never run on them:
//  - the peer thread accepts every connection and hands it to a thread of its own (at most
//    kMaxConnections at once), which reads the request and answers kExport itself, from the
//    export cache (a dup() sent by SCM_RIGHTS; no table lock, no CUDA call), so importers are
//    served while application threads sit in long driver calls, and idle or slow clients
//    block no one else; and kHeldAllocations, from the sharing table (its lock, never held
//    across a driver call), so a creator's step can ask an importer whose own control thread
//    is busy with a step of its own;
//  - the control thread runs every other request, one at a time (control.h), handed over by
//    the peer thread through a bounded queue (full: refused at once, nothing changed).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/messages.h"
#include "common/ticket.h"
#include "common/unique_fd.h"
#include "shim/endpoint/served.h"

namespace cusnap::shim {

class Endpoint {
 public:
  /// Bounds (ms) on one connection's request and reply; a slow peer cannot hold a thread
  /// longer than this.
  static constexpr int kRequestTimeoutMs = 5'000;
  static constexpr int kReplyTimeoutMs = 30'000;
  /// Requests waiting for the control thread before new ones are refused.
  static constexpr size_t kControlQueueLimit = 8;
  /// Connections served at once (a thread each); more are closed unanswered.
  static constexpr int kMaxConnections = 64;
  /// The longest request payload read (every request is a few fields); a longer one is
  /// refused unread, so 64 connections hold at most 64 x 64 KiB of the process's memory.
  static constexpr size_t kMaxRequestBytes = 64 * 1024;

  /// Creates `control_dir` (mode 0700) if needed, removes sockets of dead processes there
  /// (including a stale one at this pid's path), listens at EndpointPath(control_dir, pid)
  /// and starts both threads. The Endpoint is never destroyed (threads may outlive exit
  /// handlers). Errors name the path. `served`: what its requests are answered from; it
  /// outlives the endpoint's threads.
  static Result<Endpoint*> Start(const std::string& control_dir, ServedProcess& served);

  /// Fork child only: closes the inherited listener (the threads do not exist in the child)
  /// without touching the parent's socket file or any lock.
  void AbandonAfterFork();

  /// Removes the socket file if this process created it (exit).
  void Unlink();

  const std::string& path() const { return path_; }

 private:
  struct Pending {
    UniqueFd connection;
    proto::Message request;
  };

  /// What a thread the endpoint starts runs first (RunThread).
  struct ThreadStart {
    void* (*main)(void*);
    void* arg;
    const char* name;
    Endpoint* counted;  ///< counts itself running there; nullptr for a connection's thread
  };

  explicit Endpoint(ServedProcess& served) : served_(served) {}
  /// Starts a detached thread with every signal blocked that runs RunThread(`start`); false
  /// when none could be started (`start` freed).
  static bool StartThread(ThreadStart* start, size_t stack_bytes = 0);
  /// Names the thread, counts it running when asked (running_), then runs its main.
  static void* RunThread(void* start);
  /// Waits until `count` threads counted themselves running, at most `timeout_ms`.
  bool AwaitRunning(int count, int timeout_ms);
  static void* PeerMain(void* self);
  static void* ControlMain(void* self);
  /// Serves one connection (ServeConnection) on a thread of its own.
  static void* ConnectionMain(void* job);
  void Dispatch(UniqueFd connection);
  void ServeConnection(UniqueFd connection);
  void ServeExport(int connection, const proto::Message& request);
  /// kHeldAllocations: which of the request's allocations this process holds (sharing table).
  void ServeHeldAllocations(int connection, const proto::Message& request);
  /// Remembers the process at the other end of `connection` (SO_PEERCRED) as an importer of
  /// `id` in the export cache (INSPECT reports it; the coordinator refuses a checkpoint that
  /// leaves a live importer out). Error (code: the errno) when no descriptor is free to read
  /// the importer's start time: the export is refused, not handed out unnoted.
  Status NoteImporter(int connection, TicketKind kind, const proto::ObjectId& id);
  void Enqueue(UniqueFd connection, proto::Message request);
  /// Sends `reply` on `connection`; a failure is logged (the client sees its own error).
  void Reply(int connection, const proto::Message& reply, int timeout_ms);

  ServedProcess& served_;
  std::string path_;
  int owner_pid_ = 0;
  UniqueFd listener_;
  std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<Pending> queue_;
  std::atomic<int> connections_{0};  ///< connection threads running
  // Start returns once the peer and control threads run: an application that forks at once
  // (a worker pool, tests/integration/criu_job.cc) must not fork while one of them is still
  // inside its start, where the thread library and a sanitizer's allocator hold locks the
  // child inherits held (an ASan child deadlocked on its first allocation of that size).
  std::mutex running_mutex_;
  std::condition_variable running_changed_;
  int running_ = 0;
};

}  // namespace cusnap::shim
