// Process and object identities that survive checkpoint and restore: a process is its pid
// plus its start time (field 22 of /proc/<pid>/stat, clock ticks since boot), which tells a
// live creator apart from a later process that reused its pid; an allocation or multicast
// object is its creator's identity plus a local id (proto::ObjectId). Also the small /proc
// readers both the shim and the coordinator use (no stdio, no strtoull: the shim's glibc
// ceiling).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/protocol.h"

namespace cusnap {

/// Parses the decimal number at `*p` (up to `end`), advancing past it; false when no digit
/// is there. Usable in the shim (no strtoull).
bool ParseDecimal(const char*& p, const char* end, uint64_t* out);

/// Reads up to `capacity` bytes of the file at `path` (a /proc or /sys file: open, read,
/// close; no stdio) into `buf`; the bytes read, or -1 when it cannot be opened.
ssize_t ReadSmallFile(const char* path, char* buf, size_t capacity);

/// Start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22, see
/// proc(5)) as this process sees it (a reader in a time namespace sees every start time
/// shifted by its boot-time offset), or 0 when the process does not exist or its stat line
/// cannot be parsed.
uint64_t KernelStartTime(int pid);


/// A process's identity start time: KernelStartTime, except for a process that CRIU brought
/// back (`cusnap restore --images-dir`). To the kernel that is a new process (a new start
/// time), to every record it is the checkpointed one (its memory, tickets and the state file
/// name the start time it had). CRIU also puts the restored tree in a time namespace of its
/// own (so its clocks run on from the dump), and /proc shows start times shifted by the
/// reader's boot-time offset: the restore writes <control dir>/restored/<pid> holding
/// "<new start seen from outside> <new start seen from inside the tree> <original start>";
/// a kernel start time equal to either new one is reported as the original. A later process reusing the pid has another start time: the alias never
/// applies to it. 0 when the process does not exist.
uint64_t ProcessStartTime(int pid);

/// ProcessStartTime, or an Error (code: the errno) when /proc could not be read for want of a
/// descriptor or of memory (EMFILE, ENFILE, ENOMEM): that says nothing of `pid`, so a caller
/// judging whether another process lives fails its own step instead (it can be retried).
Result<uint64_t> ProcessStartTimeOrShortage(int pid);

/// The alias file for `pid` (RestoredAliasPath) applied to kernel start time `now`: the
/// original start time when the file names `now` as a restored one, else `now`.
uint64_t RestoredStartTime(int pid, uint64_t now);

/// <control_dir>/restored/<pid>.
std::string RestoredAliasPath(const std::string& control_dir, int pid);

/// This process's pid and start time, re-read after fork (cheap: cached per pid).
struct ProcessIdentity {
  int pid = 0;
  uint64_t start_time = 0;
};
ProcessIdentity SelfIdentity();

/// True when `id` was created by `process`.
inline bool CreatedBy(const proto::ObjectId& id, const ProcessIdentity& process) {
  return id.creator_pid == process.pid && id.creator_start == process.start_time;
}

inline bool operator==(const proto::ObjectId& a, const proto::ObjectId& b) {
  return a.creator_pid == b.creator_pid && a.creator_start == b.creator_start &&
         a.local_id == b.local_id;
}

/// True when both capabilities are the same, in time independent of where they differ (a
/// peer cannot learn a secret a word at a time from reply latency).
inline bool SameCapability(const proto::Capability& a, const proto::Capability& b) {
  const uint64_t diff = (a.word[0] ^ b.word[0]) | (a.word[1] ^ b.word[1]);
  return diff == 0;
}

/// "allocation <local id> of pid <pid> (start <ticks>)", for error messages.
std::string DescribeObject(const proto::ObjectId& id, const char* what = "allocation");

}  // namespace cusnap
