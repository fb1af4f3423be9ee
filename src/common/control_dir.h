// Trust in the control directory: endpoints are found by path, so whoever owns
// the directory decides who answers. A directory someone else pre-created (the default
// /tmp/cusnap-<uid> when XDG_RUNTIME_DIR is unset), one others can enter, or a symbolic link
// is refused by the shim (no endpoint is started there) and by every client (no request is
// sent there). Clients also check who answers (socket.h, CheckEndpointPeer).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/error.h"
#include "common/unique_fd.h"

namespace cusnap {

/// `dir` as its plain components: "" and "." parts and trailing slashes dropped ("a//b/./"
/// -> "a/b"; a relative path keeps a leading "./"). ".." is kept (OpenControlDir refuses it).
std::string LexicalControlPath(const std::string& dir);

/// What is wrong with a directory of owner `uid` and mode `mode` (st_mode) as a control
/// directory of effective user `self`: "" when it is owned by `self` and its permission bits
/// are exactly 0700; otherwise the reason (owner named, mode in octal).
std::string ControlDirProblem(uid_t uid, mode_t mode, uid_t self);

/// What is wrong with `name`, an ancestor of a control directory (or a symbolic link on the
/// way to it), of owner `uid` and mode `mode` (st_mode), for user `self`: "" when root or
/// `self` owns it and, if a directory, others cannot write to it or it is sticky (/tmp);
/// otherwise the reason, naming it (ssh's StrictModes rule).
std::string AncestorProblem(const std::string& name, uid_t uid, mode_t mode, uid_t self);

/// Walks every ancestor of `dir` from "/" (relative paths from the working directory), one
/// component at a time, following a symbolic link only if AncestorProblem accepts it, and
/// checks each with AncestorProblem. "" when all pass, otherwise the first problem.
std::string ControlDirAncestorsProblem(const std::string& dir);

/// Opens `dir` as LexicalControlPath gives it (O_DIRECTORY | O_NOFOLLOW: a symbolic link as
/// the last component is refused, never followed, also when `dir` ends with "/" or "/.";
/// a path with ".." is refused, EINVAL) and checks it with ControlDirProblem and its ancestors with
/// ControlDirAncestorsProblem. Returns the descriptor (CLOEXEC), so
/// callers can work relative to what was checked. Errors name the directory: ENOENT when it
/// does not exist, ELOOP for a symbolic link, ENOTDIR, EPERM for a wrong owner or mode.
Result<UniqueFd> OpenControlDir(const std::string& dir);

/// For clients listing a control directory: "" when `dir` passes OpenControlDir, or does not
/// exist and its existing parents pass ControlDirAncestorsProblem; otherwise the reason
/// (nothing in it may be trusted).
std::string UnsafeControlDir(const std::string& dir);

/// The shim's side: refuses (EPERM) when a parent fails ControlDirAncestorsProblem, then
/// creates `dir` if missing (missing parents with mode 0700; the directory
/// itself fchmod-ed to 0700 through its descriptor when this call created it, whatever the
/// umask), then OpenControlDir. An existing directory is never re-moded: one that is not
/// ours or not 0700 is refused (EPERM) and nothing is created in it.
Result<UniqueFd> MakeControlDir(const std::string& dir);

/// A job started with `cusnap run --pid-namespace` names its endpoints and hold markers by
/// the pids of its own PID namespace, which other jobs' pids may equal: they live in a
/// control directory of its own, "<control dir>/pidns-XXXXXX" (its CUSNAP_CONTROL_DIR).
inline constexpr const char* kJobControlDirPrefix = "pidns-";

/// Creates a job control directory below `control_dir` (MakeControlDir first; the new one
/// has mode 0700, a random name) and returns its path. Errors as MakeControlDir's, or errno
/// from mkdtemp.
Result<std::string> MakeJobControlDir(const std::string& control_dir);

/// Whether `dir` is a job control directory directly below `control_dir` (lexically:
/// "<control_dir>/pidns-" and six letters or digits, nothing after).
bool IsJobControlDir(const std::string& control_dir, const std::string& dir);

}  // namespace cusnap
